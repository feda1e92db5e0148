"""Kernel > Interrupt stops what a cell runs (issue 29, item 4).

A KeyboardInterrupt is a BaseException, not an Exception: only a bare ``except:``, ``except BaseException``
or ``except KeyboardInterrupt`` can swallow it. Every such handler in the package must let it go on
(a bare ``raise``, ``raise <the caught exception>`` or ``raise ... from <it>``), checked with ``ast``; and an
interrupt sent to a real kernel while ``lab05.live_compile()`` runs ends the cell with KeyboardInterrupt.
"""
from __future__ import annotations

import ast
import contextlib
import os
import queue
import time
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "infralens_lab"
FILES = sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)
CATCH_ALL = {"BaseException", "KeyboardInterrupt"}


def _catches_interrupt(handler: ast.ExceptHandler) -> bool:
    if handler.type is None:
        return True
    types = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any((isinstance(t, ast.Name) and t.id in CATCH_ALL) or (isinstance(t, ast.Attribute) and t.attr in CATCH_ALL)
               for t in types)


def _reraises(handler: ast.ExceptHandler) -> bool:
    for node in ast.walk(handler):
        if not isinstance(node, ast.Raise):
            continue
        if node.exc is None:
            return True
        if handler.name and isinstance(node.exc, ast.Name) and node.exc.id == handler.name:
            return True
        if handler.name and isinstance(node.cause, ast.Name) and node.cause.id == handler.name:
            return True
    return False


def swallowing_handlers(source: str, filename: str = "<src>") -> list[int]:
    """Lines of ``except`` handlers in ``source`` that can catch KeyboardInterrupt and never re-raise it."""
    return [h.lineno for h in ast.walk(ast.parse(source, filename))
            if isinstance(h, ast.ExceptHandler) and _catches_interrupt(h) and not _reraises(h)]


def test_the_rule_sees_what_swallows_and_what_does_not():
    assert swallowing_handlers("try:\n    f()\nexcept:\n    pass\n") == [3]
    assert swallowing_handlers("try:\n    f()\nexcept BaseException as e:\n    log(e)\n") == [3]
    assert swallowing_handlers("try:\n    f()\nexcept (ValueError, KeyboardInterrupt):\n    pass\n") == [3]
    assert swallowing_handlers("try:\n    f()\nexcept BaseException:\n    cleanup()\n    raise\n") == []
    assert swallowing_handlers("try:\n    f()\nexcept BaseException as e:\n    raise SystemExit(1) from e\n") == []
    assert swallowing_handlers("try:\n    f()\nexcept Exception:\n    pass\n") == []  # not an interrupt


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(PKG)))
def test_no_handler_in_the_package_swallows_an_interrupt(path):
    bad = swallowing_handlers(path.read_text(), str(path))
    assert not bad, (f"{path.relative_to(PKG.parent)}: lines {bad} catch KeyboardInterrupt (bare except, BaseException) "
                     "and do not re-raise it; catch Exception instead, or end the handler with `raise`")


def test_interrupting_live_compile_stops_the_cell(tmp_path):
    """A real kernel runs ``lab05.live_compile()``; Kernel > Interrupt (SIGINT) one second into it must end the
    cell with KeyboardInterrupt, not let it finish. The kernel gets an empty Inductor cache of its own: with a
    warm one (lab 05 run earlier on the same machine, e.g. by nbval) the compile can end before the interrupt."""
    manager = pytest.importorskip("jupyter_client.manager", reason="needs the Jupyter test stack")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
           "TORCHINDUCTOR_AUTOGRAD_CACHE": "0", "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    km, kc = manager.start_new_kernel(kernel_name="python3", env=env)
    try:
        kc.execute_interactive("from infralens_lab.labs_support import lab05", timeout=180)
        msg_id = kc.execute("print('started', flush=True)\nlab05.live_compile()\nprint('finished')")
        seen, error, interrupting = [], None, False
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                m = kc.get_iopub_msg(timeout=1.0)
            except queue.Empty:
                if interrupting:  # as a learner presses Interrupt again: one SIGINT can land where torch.compile
                    km.interrupt_kernel()  # turns it into a fallback, the next one stops the cell
                continue
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "stream":
                seen.append(m["content"]["text"])
                if "started" in m["content"]["text"]:
                    time.sleep(1.0)  # inside torch.compile's first compile
                    km.interrupt_kernel()
                    interrupting = True
            elif m["msg_type"] == "error":
                error = m["content"]["ename"]
            elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                break
        # the kernel's own verdict on the cell: its execute reply. A further SIGINT (pressed again while the cell
        # seemed stuck) can land while IPython formats the first one's traceback (a second or more of torch frames on a
        # busy machine: IPython then prints "KeyboardInterrupt" as text, no error message) or while the kernel sends
        # its reply (lost). Whatever of the three arrived must say KeyboardInterrupt, and at least one did.
        verdict = None
        with contextlib.suppress(queue.Empty):
            while verdict is None:
                reply = kc.get_shell_msg(timeout=5)
                if reply["parent_header"].get("msg_id") == msg_id:
                    verdict = reply["content"].get("ename") or reply["content"]["status"]
        said = {x for x in (error, verdict) if x}
        shown = any("KeyboardInterrupt" in s for s in seen)
        assert said <= {"KeyboardInterrupt"} and (said or shown), \
            f"the interrupt did not stop the cell: reply {verdict!r}, error message {error!r}, output {seen}"
        assert not any("finished" in s for s in seen)
    finally:
        km.shutdown_kernel(now=True)
