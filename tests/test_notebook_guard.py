"""The notebook guard (issue 29, items 1-3) in a real IPython shell: the guidance line for a NameError
after a restart or an out-of-order run, answer cells whose last run stopped before the answer was
assigned (a SyntaxError, an exception above it) and ``check`` refusing that stale value, and saved
self-checks built again under their saved widget ids. The browser test does the same in JupyterLab."""
from __future__ import annotations

import json
import os
import queue
import time

import pytest

IPython = pytest.importorskip("IPython", reason="needs IPython (the Jupyter test stack)")
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402  (after the IPython importorskip)

from infralens_lab import notebook_guard  # noqa: E402  (after the IPython importorskip)
from infralens_lab.quiz import check, question, widgets  # noqa: E402  (after the IPython importorskip)

SETUP = "import math\nfrom infralens_lab.quiz import check\nbase = 41"
# the kernel-start extension: the quiz's, which registers its restore hook with the guard before loading it
KERNEL_EXTENSION = "infralens_lab.quiz"


def _notebook(path, cells):
    """Write a notebook of ("markdown" | "code", source) cells."""
    nb = {"cells": [{"cell_type": t, "source": s, "metadata": {}, **({"outputs": [], "execution_count": None}
                                                                       if t == "code" else {})} for t, s in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb))
    return path


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """A fresh IPython shell (not the global instance) with the guard, and a notebook it runs from."""
    nb = _notebook(tmp_path / "lab.ipynb", [
        ("markdown", "# Lab 99 — the fixture"), ("code", SETUP),
        ("markdown", "## Middle section\n\nWords."), ("code", "rec = base + 1"),
        ("code", "total = rec * 2\nprint(total)"), ("markdown", "## Answer"),
        ("code", 'ANSWER_Q1 = "C"\ncheck("lab00.q1", ANSWER_Q1)')])
    monkeypatch.setenv("JPY_SESSION_NAME", str(nb))
    monkeypatch.setattr(notebook_guard, "_not_run", {})
    sh = InteractiveShell()
    assert notebook_guard.install(sh) and notebook_guard.install(sh)  # idempotent
    yield sh
    sh.events.callbacks["pre_run_cell"].clear()
    sh.events.callbacks["post_run_cell"].clear()


def _run(shell, capsys, src):
    r = shell.run_cell(src, store_history=True)
    out = capsys.readouterr()
    return r, out.out + out.err


def test_defined_names_reads_what_a_cell_binds():
    src = ("%matplotlib inline\nimport numpy as np, os.path\nfrom x import y as z\nA = B = 1\nc, (d, e) = 1, (2, 3)\n"
           "def f(a):\n    inner = a\nclass K: pass\nfor i in range(2):\n    pass\nwith open('x') as fh:\n    pass\n"
           "sq = [j * j for j in range(3)]\nif (w := 3):\n    pass\n")
    assert notebook_guard.defined_names(src) == {"np", "os", "z", "A", "B", "c", "d", "e", "f", "K", "i", "fh", "sq", "w"}
    assert notebook_guard.defined_names("x = (") == frozenset()  # does not parse: defines nothing


def test_restart_then_a_middle_cell_names_the_set_up_cell(shell, capsys):
    r, out = _run(shell, capsys, "rec = base + 1")
    assert isinstance(r.error_in_exec, NameError)
    line = out.strip()
    assert line == ('NameError: base is not defined in this kernel yet. Run the set-up cell at the top first: it defines '
                    'base (under "Lab 99 — the fixture", starting "import math").')
    assert "Traceback" not in out and "---->" not in out


def test_an_out_of_order_cell_names_the_nearest_cell_above(shell, capsys):
    _, out = _run(shell, capsys, "total = rec * 2\nprint(total)")
    assert 'Run the cell that defines it first (under "Middle section", starting "rec = base + 1")' in out
    assert "Run All Above Selected Cell" in out and "Traceback" not in out


def test_a_name_no_cell_defines_keeps_its_traceback(shell, capsys):
    _, out = _run(shell, capsys, "print(not_defined_anywhere)")
    assert "Traceback" in out and "not_defined_anywhere" in out and "set-up cell" not in out


def test_a_name_error_inside_library_code_keeps_its_traceback(shell, capsys):
    shell.run_cell("import types\nm = types.ModuleType('lib')\nexec('def g():\\n    return base', m.__dict__)",
                   store_history=True)
    _, out = _run(shell, capsys, "m.g()")
    assert "Traceback" in out and "set-up cell" not in out


def test_without_a_session_the_notebook_holding_the_cell_is_used(shell, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("JPY_SESSION_NAME")
    monkeypatch.chdir(tmp_path)  # the working folder holds lab.ipynb
    _, out = _run(shell, capsys, "rec = base + 1")
    assert "Run the set-up cell at the top first: it defines base" in out


# ---------------------------------------------------------------- answer cells that did not run
def test_a_syntax_error_is_recorded_and_a_fixed_run_clears_it(shell, capsys):
    _run(shell, capsys, 'ANSWER_Q1 = "B"')
    assert notebook_guard.answer_not_run("ANSWER_Q1") is None
    r, _ = _run(shell, capsys, 'x = 1\nANSWER_Q1 = "C" +\ncheck("lab00.q1", ANSWER_Q1)')
    assert isinstance(r.error_before_exec, SyntaxError)
    assert notebook_guard.answer_not_run("ANSWER_Q1") == notebook_guard.NotRun("ANSWER_Q1", "SyntaxError", 2)
    assert shell.user_ns["ANSWER_Q1"] == "B"  # the stale value
    _run(shell, capsys, 'ANSWER_Q1 = "C"')
    assert notebook_guard.answer_not_run("ANSWER_Q1") is None


def test_an_exception_above_the_assignment_counts_an_exception_below_does_not(shell, capsys):
    _run(shell, capsys, "value = 1 / 0\nANSWER_Q2 = 3")
    assert notebook_guard.answer_not_run("ANSWER_Q2") == notebook_guard.NotRun("ANSWER_Q2", "ZeroDivisionError", 1)
    _run(shell, capsys, "ANSWER_Q2 = (\n    4\n)\nvalue = 1 / 0")
    assert notebook_guard.answer_not_run("ANSWER_Q2") is None and shell.user_ns["ANSWER_Q2"] == 4


def test_check_refuses_the_stale_value_and_grade_mode_does_not_count_it(shell, capsys, monkeypatch):
    right = question("lab00.q1").answer
    _run(shell, capsys, f'ANSWER_Q1 = "{right}"')
    _run(shell, capsys, 'ANSWER_Q1 = "A" +')
    res = check("lab00.q1", shell.user_ns["ANSWER_Q1"])  # a later check of the (right, but stale) value
    out = capsys.readouterr().out
    assert res.status == "unanswered" and res.points == 0
    assert "did not run (SyntaxError at line 1)" in out and "ANSWER_Q1 still holds the value from before" in out
    assert "✓" not in out
    monkeypatch.setenv("INFRALENS_GRADE", "1")
    with pytest.raises(AssertionError, match="did not run"):
        check("lab00.q1", shell.user_ns["ANSWER_Q1"])
    capsys.readouterr()
    _run(shell, capsys, f'ANSWER_Q1 = "{right}"')
    assert check("lab00.q1", shell.user_ns["ANSWER_Q1"]).correct


def test_the_answer_cell_itself_checks_its_new_value(shell, capsys):
    right = question("lab00.q1").answer
    _run(shell, capsys, SETUP)
    _run(shell, capsys, 'ANSWER_Q1 = "A" +')
    _, out = _run(shell, capsys, f'ANSWER_Q1 = "{right}"\ncheck("lab00.q1", ANSWER_Q1)')
    assert out.startswith("✓ lab00.q1: right")


# ---------------------------------------------------------------- self-checks of a reopened notebook
def test_saved_self_checks_are_built_again_under_their_ids(tmp_path, monkeypatch):
    ipywidgets = pytest.importorskip("ipywidgets")
    view = {"output_type": "display_data", "metadata": {},
            "data": {"text/plain": "q", widgets.WIDGET_VIEW: {"version_major": 2, "version_minor": 0,
                                                          "model_id": "feedfacefeedface0001"}}}
    nb = {"cells": [{"cell_type": "code", "source": 'self_check("lab00.q1")', "metadata": {}, "outputs": [view],
                     "execution_count": 1},
                    {"cell_type": "code", "source": 'self_check("lab99.nope")', "metadata": {},
                     "outputs": [dict(view, data={widgets.WIDGET_VIEW: {"model_id": "feedfacefeedface0002"}})],
                     "execution_count": 2}],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "saved.ipynb"
    path.write_text(json.dumps(nb))
    assert widgets.saved_self_checks(path) == [("lab00.q1", "feedfacefeedface0001"), ("lab99.nope", "feedfacefeedface0002")]
    monkeypatch.setattr(widgets, "_ipython_and_widgets", lambda: (print, ipywidgets))
    monkeypatch.setattr(widgets, "_restored", [])
    assert widgets.restore_self_checks(path) == 1  # the unknown question is skipped
    box = widgets._restored[0]
    assert box.model_id == "feedfacefeedface0001" and widgets.CSS_CLASS in box._dom_classes
    assert "lab00.q1" in box.children[0].value
    assert widgets.restore_self_checks(path) == 0  # already live
    # restored without announcing itself: the front end asks for the state once connected (a restart raced)
    manager = pytest.importorskip("comm").get_comm_manager()
    restored = [box, *box.children, box.layout]
    assert all(w.comm.primary is False and manager.comms[w.comm.comm_id] is w.comm for w in restored)
    assert box.comm.comm_id == "feedfacefeedface0001"
    fresh = ipywidgets.Button()
    assert fresh.comm.primary is True  # the replacement ends with the restore
    fresh.close()
    box.close()
    assert widgets.restore_self_checks(tmp_path / "missing.ipynb") == 0


def test_a_fresh_kernel_serves_the_saved_self_check_without_announcing_it(tmp_path):
    """A real kernel started as `make lab` starts it, on a notebook with a saved self-check: the box is among the
    kernel's widget comms (what the front end asks for once connected), no comm_open goes out at start (those
    raced a restart in CI: "widget model not found"), and the box answers a state request (a comm without its
    kernel would stay silent, and Check would give no feedback)."""
    manager = pytest.importorskip("jupyter_client.manager")
    pytest.importorskip("ipywidgets")
    model_id = "feedfacefeedface0003"
    view = {"output_type": "display_data", "metadata": {},
            "data": {"text/plain": "q", widgets.WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": model_id}}}
    nb = {"cells": [{"cell_type": "code", "source": 'self_check("lab00.q1")', "metadata": {}, "outputs": [view],
                     "execution_count": 1}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "saved.ipynb"
    path.write_text(json.dumps(nb))
    env = {k: v for k, v in os.environ.items() if k != "JPY_SESSION_NAME"} | {"JPY_SESSION_NAME": str(path)}
    km, kc = manager.start_new_kernel(kernel_name="python3", env=env, extra_arguments=[f"--ext={KERNEL_EXTENSION}"])
    try:
        kc.shell_channel.send(kc.session.msg("comm_info_request", {"target_name": "jupyter.widget"}))
        reply = _next(kc.get_shell_msg, 30, "comm_info_reply")
        assert reply is not None and model_id in reply["content"]["comms"], "the restored box is not a widget comm"
        kc.execute("from infralens_lab.quiz import widgets as W\nprint([b.comm.primary for b in W._restored])")
        said = _next(kc.get_iopub_msg, 30, "stream")
        assert said is not None and said["content"]["text"].strip() == "[False]", said  # restored unannounced
        kc.shell_channel.send(kc.session.msg("comm_msg", {"comm_id": model_id, "data": {"method": "request_state"}}))
        answer = _next(kc.get_iopub_msg, 30, "comm_msg", lambda m: m["content"]["comm_id"] == model_id)
        assert answer is not None, "the restored box did not answer a state request"
        assert answer["content"]["data"]["method"] == "update"
        assert "infralens-selfcheck" in answer["content"]["data"]["state"]["_dom_classes"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def _next(get, timeout_s: float, msg_type: str | None = None, where=lambda m: True):
    """The next message of ``msg_type`` (any type when None) that satisfies ``where``, or None after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            msg = get(timeout=left)
        except queue.Empty:
            return None
        if (msg_type is None or msg["msg_type"] == msg_type) and where(msg):
            return msg
    return None


# ---------------------------------------------------------------- the quiz's hook (issue 41: no import circle)
def test_the_quiz_hands_the_guard_its_restore_hook():
    """``import infralens_lab.quiz`` registers ``widgets.restore_self_checks``; the guard never imports the quiz."""
    assert notebook_guard._restore_hook is widgets.restore_self_checks
    with pytest.raises(TypeError, match="expected a callable"):
        notebook_guard.register_restore_hook("restore_self_checks")


def test_a_notebook_loaded_before_the_hook_is_restored_when_the_hook_arrives(tmp_path, monkeypatch):
    """The extension loaded before the quiz (``--ext=infralens_lab.notebook_guard`` alone): the session's notebook
    waits, and is restored the moment a hook is registered; with a hook set it is restored at once."""
    nb = _notebook(tmp_path / "saved.ipynb", [("code", "x = 1")])
    monkeypatch.setenv("JPY_SESSION_NAME", str(nb))
    monkeypatch.setattr(notebook_guard, "_restore_hook", None)
    monkeypatch.setattr(notebook_guard, "_restore_waiting", [])
    sh = InteractiveShell()
    seen = []
    try:
        notebook_guard.load_ipython_extension(sh)
        assert seen == [] and notebook_guard._restore_waiting == [nb]
        notebook_guard.register_restore_hook(seen.append)
        assert seen == [nb] and notebook_guard._restore_waiting == []
        notebook_guard.load_ipython_extension(sh)
        assert seen == [nb, nb]
        notebook_guard.register_restore_hook(None)
        notebook_guard.load_ipython_extension(sh)

        def broken(path):
            raise RuntimeError("no widgets here")
        with pytest.warns(UserWarning, match="were not restored .RuntimeError: no widgets here"):
            notebook_guard.register_restore_hook(broken)  # the import that registers it must not fail
        assert notebook_guard._restore_waiting == []
    finally:
        sh.events.callbacks["pre_run_cell"].clear()
        sh.events.callbacks["post_run_cell"].clear()
