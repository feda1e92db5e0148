"""Optional self-check widgets: the question, a way to answer, a 'Check' button, feedback.

``self_check(qid)`` is a convenience on top of the graded path (an answer variable and a
``check(...)`` cell), never a replacement: it records no score and never raises for a wrong
answer, even in grade mode. In JupyterLab it shows radio buttons (choice) or a text box
(number, text) in a container with CSS class ``infralens-selfcheck``; the same display also
carries the question as plain text and HTML, so an offline reader (or an HTML export
without widget state) still sees the question. Without IPython (a plain ``python3`` run on a GPU
machine) it prints the question. Where widgets cannot show (:func:`widgets_unavailable`: no ipywidgets,
``INFRALENS_WIDGETS=0``, or Colab's custom widget manager, turned on here, refusing) it shows the question as
text and HTML with a line saying the answer cell's ``check`` gives the feedback.

A saved notebook keeps only a reference to each widget (its model id). In a fresh kernel (a reopened
notebook, a restart) that model is gone, and JupyterLab would show "Error displaying widget: model
not found". :func:`restore_self_checks`, run at kernel start by ``infralens_lab.notebook_guard``
(``make lab``), builds each saved self-check again under its saved model id, so it shows and works
before any cell is re-run.
"""
from __future__ import annotations

import html
import importlib
import json
import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .. import colab
from .bank import BankError, Question, answer_variable, question
from .check import _judge, _message, expected_answer

CSS_CLASS = "infralens-selfcheck"
WIDGETS_ENV = "INFRALENS_WIDGETS"  # 0 / off / text: the self-checks show text, for a front end without widgets
WIDGETS_OFF = ("0", "off", "text", "no", "false")
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# A code cell's call of self_check and the question it shows (the site and the restore read it).
SELF_CHECK_CALL = re.compile(r"""self_check\(\s*["']([^"']+)["']""")


def question_text(qid: str) -> str:
    """The question as plain text: id, points, prompt, then options or the allowed answers."""
    q = question(qid)
    pts = f"{q.points:g} point{'s' if q.points != 1 else ''}"
    lines = [f"{q.id} ({pts}): {q.prompt}"]
    if q.kind == "choice":
        lines += [f"  {k}) {v}" for k, v in q.options.items()]
        lines.append(f"Answer in {answer_variable(q.id)} with the option letter as a string, e.g. "
                     f"{next(iter(q.options))!r}.")
    elif q.kind == "number":
        lines.append(f"Answer in {answer_variable(q.id)} with a number{' in ' + q.unit if q.unit else ''}.")
    elif q.kind == "function":
        lines.append(f"Answer in {answer_variable(q.id)} with a function (the function itself); it is checked on this "
                     "lab's evidence and on held-out evidence.")
    else:
        lines.append(f"Answer in {answer_variable(q.id)} with one of: {', '.join(q.words)}.")
    if q.derive is not None:
        lines.append("The right answer is worked out from the evidence this notebook shows.")
    return "\n".join(lines)


def question_html(qid: str) -> str:
    """The question as a small HTML block (for JupyterLab and HTML exports)."""
    q = question(qid)
    head, *rest = question_text(qid).splitlines()
    body = "".join(f"<div>{html.escape(line.strip())}</div>" for line in rest)
    return (f'<div class="{CSS_CLASS}-static"><b>{html.escape(q.id)}</b> '
            f"{html.escape(head.split(': ', 1)[1])}{body}</div>")


def widgets_unavailable() -> str | None:
    """Why the self-checks cannot show widgets in this kernel (then they show the question as text and HTML, and
    the answer cell's ``check`` gives the feedback), or None when they can. Not possible: ``INFRALENS_WIDGETS``
    set to ``0``/``off``/``text`` (a front end without a widget manager), ipywidgets missing, or Colab's custom
    widget manager refusing to start (:func:`infralens_lab.colab.enable_colab_widgets` turns it on in Colab)."""
    setting = os.environ.get(WIDGETS_ENV, "").strip().lower()
    if setting in WIDGETS_OFF:
        return f"{WIDGETS_ENV}={setting}"
    try:
        import ipywidgets  # noqa: F401  (optional: ipywidgets, only here; the check: does it import?)
    except ImportError:
        return "ipywidgets is not installed"
    return colab.enable_colab_widgets()


def _ipython_display():
    """IPython's ``display`` in a running IPython, else None."""
    try:
        from IPython import get_ipython  # optional: IPython, only here
        from IPython.display import display  # optional: IPython, only here
    except ImportError:
        return None
    return display if get_ipython() is not None else None


def _ipython_and_widgets():
    """``(display, ipywidgets)`` where self-checks can show widgets, else None."""
    display = _ipython_display()
    if display is None or widgets_unavailable() is not None:
        return None
    import ipywidgets  # optional: ipywidgets, only here (widgets_unavailable imported it)

    return display, ipywidgets


def feedback_for(q: Question, answer: Any, evidence: Any = None) -> str:
    """The same feedback text ``check`` prints, without grading side effects."""
    expected = expected_answer(q, evidence)
    status, text = _judge(q, answer, expected)
    return _message(q, status, text, expected)


RADIO_MAX_WORDS = 8  # a text question with at most this many allowed words gets radio buttons


def widget_feedback(q: Question, value: Any, evidence: Any = None) -> str:
    """What the widget's Check button prints for ``value`` (None or blank: nothing chosen yet).

    A right answer also says which line to write, because only the answer variable is graded;
    a derived question shown without its evidence says where it is checked instead.
    """
    var = answer_variable(q.id)
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if q.kind == "number":
            return "The box is empty: type your answer first."
        return "Nothing chosen yet: pick one first."
    if q.derive is not None and evidence is None:
        return (f"This answer is worked out from the evidence in this notebook, so this box cannot check it. "
                f"Set {var} = {_literal(q, value)} in the answer cell below and run the check cell after it.")
    text = feedback_for(q, value, evidence)
    if text.startswith("✓"):
        text += f"\nNow set {var} = {_literal(q, value)} in the answer cell below: only that variable is graded."
    return text


def _literal(q: Question, value: Any) -> str:
    """``value`` as the Python literal to type into the answer cell."""
    if q.kind == "number" and isinstance(value, str):
        v = value.strip().replace(",", "")
        try:
            float(v)
            return v
        except ValueError:
            return repr(value.strip())
    if q.kind == "choice" and isinstance(value, str):
        return repr(value.strip().upper())
    return repr(value.strip() if isinstance(value, str) else value)


def _build(q: Question, ipywidgets, evidence: Any, model_id: str | None = None):
    if q.kind == "choice":
        # option letters only: the full option texts are shown above the widget, and long labels
        # wrap onto the next radio button in JupyterLab
        picker = ipywidgets.RadioButtons(options=[(k, k) for k in q.options], value=None,
                                         orientation="horizontal", layout=ipywidgets.Layout(width="auto"))
    elif q.kind == "text" and len(q.vocabulary) <= RADIO_MAX_WORDS:
        picker = ipywidgets.RadioButtons(options=list(q.vocabulary), value=None, layout=ipywidgets.Layout(width="auto"))
    elif q.kind == "text":
        picker = ipywidgets.Dropdown(options=[("(choose)", None)] + [(w, w) for w in q.vocabulary], value=None)
    else:
        picker = ipywidgets.Text(value="", placeholder="a number" + (f" in {q.unit}" if q.unit else ""))
    button = ipywidgets.Button(description="Check", button_style="primary")
    out = ipywidgets.Output()

    def on_click(_):
        with out:
            out.clear_output()
            print(widget_feedback(q, picker.value, evidence))

    button.on_click(on_click)
    box = ipywidgets.VBox([ipywidgets.HTML(question_html(q.id)), picker, button, out],
                          **({"model_id": model_id} if model_id else {}))
    box.add_class(CSS_CLASS)
    return box


_restored: list = []  # the restored boxes, kept alive for the kernel's lifetime


def saved_self_checks(notebook: str | Path) -> list[tuple[str, str]]:
    """``(question id, widget model id)`` of every self-check output saved in ``notebook`` (the k-th widget
    output of a cell belongs to its k-th ``self_check("...")`` call)."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    found = []
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        src = cell.get("source", "")
        qids = SELF_CHECK_CALL.findall("".join(src) if isinstance(src, list) else src)
        views = [o["data"][WIDGET_VIEW].get("model_id") for o in cell.get("outputs", [])
                 if isinstance(o.get("data"), dict) and isinstance(o["data"].get(WIDGET_VIEW), dict)]
        found += [(qid, mid) for qid, mid in zip(qids, views, strict=False) if mid]  # a cell never run has no views
    return found


def restore_self_checks(notebook: str | Path) -> int:
    """Build every self-check saved in ``notebook`` again in this kernel, each under its saved widget model id,
    so that JupyterLab shows (and can use) it without re-running its cell. Questions the bank does not know
    are skipped; does nothing without IPython and ipywidgets. Returns how many were restored."""
    env = _ipython_and_widgets()
    if env is None:
        return 0
    _, ipywidgets = env
    try:
        saved = saved_self_checks(notebook)
    except (OSError, ValueError):  # an unreadable notebook: nothing to restore
        return 0
    n = 0
    for qid, model_id in saved:
        try:
            q = question(qid)
        except (BankError, KeyError):
            continue
        if any(box.model_id == model_id for box in _restored):  # already restored in this kernel
            continue
        with _no_comm_open():
            _restored.append(_build(q, ipywidgets, None, model_id=model_id))
        n += 1
    return n


def _running_kernel():
    """The ipykernel kernel this process serves, or None (no ipykernel, or not started)."""
    try:
        from ipykernel.kernelbase import Kernel  # only inside a kernel, where it is already imported
    except ImportError:
        return None
    return Kernel.instance() if Kernel.initialized() else None


@contextmanager
def _no_comm_open():
    """Widgets built inside get a registered comm that does not announce itself (``primary=False``: no
    ``comm_open`` on iopub). The front end learns of them the one way that holds after a restart: its widget
    manager asks the kernel for every widget's state once it is connected (``_loadFromKernel``). Announced
    at kernel start, a restart let the front end see some comm_opens and miss others (the server subscribes
    to the new kernel's iopub part-way through), and a box whose children it missed failed with "widget
    model not found" in the browser console (CI, tests/test_browser.py). ipywidgets creates every comm
    through ``ipywidgets.comm.create_comm``; it is replaced for the duration of the ``with`` only."""
    shim = importlib.import_module("ipywidgets.comm")
    create = shim.create_comm

    def unannounced(*args, **kwargs):
        kwargs["primary"] = False
        made = create(*args, **kwargs)
        shim.get_comm_manager().register_comm(made)  # what open() does for an announced comm
        if hasattr(made, "kernel") and made.kernel is None:  # open() sets it too; ipywidgets sends nothing without
            made.kernel = _running_kernel()
        return made

    shim.create_comm = unannounced
    try:
        yield
    finally:
        shim.create_comm = create


def self_check(qid: str, evidence: Any = None) -> None:
    """Show an optional self-check for ``qid`` (widgets in Jupyter, printed question elsewhere).

    ``evidence`` lets the widget check a question whose answer is derived from evidence; without
    it the question is still shown, and the widget points to the check cell. Returns None so
    nothing extra is displayed.
    """
    q = question(qid)
    text = question_text(qid)
    env = _ipython_and_widgets()
    if env is None:
        shown = _ipython_display()
        if shown is None:  # plain python: the question, printed
            print(text)
            return None
        why = widgets_unavailable() or "no widgets here"
        note = (f"(No self-check buttons here: {why}. Set {answer_variable(qid)} in the answer cell below and run "
                f"it: its check(\"{qid}\", {answer_variable(qid)}) gives the feedback.)")
        shown({"text/plain": f"{text}\n{note}",
               "text/html": question_html(qid) + f"<div><i>{html.escape(note)}</i></div>"}, raw=True)
        return None
    display, ipywidgets = env
    box = _build(q, ipywidgets, evidence)
    bundle = {"text/plain": text, "text/html": question_html(qid),
              WIDGET_VIEW: box._repr_mimebundle_()[WIDGET_VIEW]}
    display(bundle, raw=True)
    return None
