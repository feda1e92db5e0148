"""Optional self-check widgets: the question, a way to answer, a 'Check' button, feedback.

``self_check(qid)`` is a convenience on top of the graded path (an answer variable and a
``check(...)`` cell), never a replacement: it records no score and never raises for a wrong
answer, even in grade mode. In JupyterLab it shows radio buttons (choice) or a text box
(number, text) in a container with CSS class ``infralens-selfcheck``; the same display also
carries the question as plain text and HTML, so an offline reader (or an HTML export
without widget state) still sees the question. Without IPython or ipywidgets (a plain
``python3`` run on a GPU machine) it prints the question.
"""
from __future__ import annotations

import html
from typing import Any

from .bank import Question, question
from .check import _judge, _message, expected_answer

CSS_CLASS = "infralens-selfcheck"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def question_text(qid: str) -> str:
    """The question as plain text: id, points, prompt, then options or the allowed answers."""
    q = question(qid)
    pts = f"{q.points:g} point{'s' if q.points != 1 else ''}"
    lines = [f"{q.id} ({pts}): {q.prompt}"]
    if q.kind == "choice":
        lines += [f"  {k}) {v}" for k, v in q.options.items()]
        lines.append(f"Answer with the option key as a string, e.g. {next(iter(q.options))!r}.")
    elif q.kind == "number":
        lines.append(f"Answer with a number{' in ' + q.unit if q.unit else ''}.")
    else:
        lines.append(f"Answer with one of: {', '.join(q.vocabulary)}.")
    if q.derive is not None:
        lines.append("This answer is checked against the evidence shown above.")
    return "\n".join(lines)


def question_html(qid: str) -> str:
    """The question as a small HTML block (for JupyterLab and HTML exports)."""
    q = question(qid)
    head, *rest = question_text(qid).splitlines()
    body = "".join(f"<div>{html.escape(line.strip())}</div>" for line in rest)
    return (f'<div class="{CSS_CLASS}-static"><b>{html.escape(q.id)}</b> '
            f"{html.escape(head.split(': ', 1)[1])}{body}</div>")


def _ipython_and_widgets():
    try:
        from IPython import get_ipython
        from IPython.display import display
        import ipywidgets
    except ImportError:
        return None
    if get_ipython() is None:
        return None
    return display, ipywidgets


def feedback_for(q: Question, answer: Any, evidence: Any = None) -> str:
    """The same feedback text ``check`` prints, without grading side effects."""
    expected = expected_answer(q, evidence)
    status, text = _judge(q, answer, expected)
    return _message(q, status, text, expected)


def _build(q: Question, ipywidgets, evidence: Any):
    if q.kind == "choice":
        # option letters only: the full option texts are shown above the widget, and long labels
        # wrap onto the next radio button in JupyterLab
        picker = ipywidgets.RadioButtons(options=[(k, k) for k in q.options], value=None,
                                         orientation="horizontal", layout=ipywidgets.Layout(width="auto"))
    else:
        placeholder = "a number" if q.kind == "number" else " / ".join(q.vocabulary)
        picker = ipywidgets.Text(value="", placeholder=placeholder)
    button = ipywidgets.Button(description="Check", button_style="primary")
    out = ipywidgets.Output()

    def on_click(_):
        with out:
            out.clear_output()
            print(feedback_for(q, picker.value, evidence))

    button.on_click(on_click)
    box = ipywidgets.VBox([ipywidgets.HTML(question_html(q.id)), picker, button, out])
    box.add_class(CSS_CLASS)
    return box


def self_check(qid: str, evidence: Any = None) -> None:
    """Show an optional self-check for ``qid`` (widgets in Jupyter, printed question elsewhere).

    ``evidence`` is needed for questions whose answer is derived from evidence, as in ``check``.
    Returns None so nothing extra is displayed.
    """
    q = question(qid)
    if q.derive is not None and evidence is None:
        raise ValueError(f"{qid} is checked against evidence: call self_check({qid!r}, evidence=<the evidence above>)")
    text = question_text(qid)
    env = _ipython_and_widgets()
    if env is None:
        print(text)
        return None
    display, ipywidgets = env
    box = _build(q, ipywidgets, evidence)
    bundle = {"text/plain": text, "text/html": question_html(qid),
              WIDGET_VIEW: box._repr_mimebundle_()[WIDGET_VIEW]}
    display(bundle, raw=True)
    return None
