"""What the learner's kernel does for them when a notebook is run out of order.

Three guards, one IPython extension (``%load_ext infralens_lab.notebook_guard``):

* **A missing name gets one line of guidance, not a traceback.** After a kernel restart (or when
  a cell further down is run first) a cell that uses ``st`` raises ``NameError``. The guard finds the
  code cell of this notebook that defines ``st`` (the notebook's path comes from Jupyter's
  ``JPY_SESSION_NAME``; without it, the ``*.ipynb`` of the working folder and of ``labs/`` holding the
  cell that failed) by parsing the cells with :mod:`ast`, and says which cell to run: "Run the set-up
  cell at the top first: it defines st (under "Lab 01 ...", starting "import inspect")". A
  ``NameError`` raised in library code, or for a name no cell defines, keeps its usual traceback.
* **An answer cell that did not run is remembered.** A cell that assigns ``ANSWER_Q1`` and stops
  before the assignment (a SyntaxError, or an exception on or above that line) leaves the old value
  in place; :func:`answer_not_run` says so, and ``quiz.check`` refuses to judge that stale value.
* **Self-checks survive a reopened notebook.** Loaded at kernel start, it makes each saved ``self_check``
  output of the notebook live again under its saved widget id, so JupyterLab finds the model instead of
  showing "Error displaying widget: model not found". The guard does not know the quiz: it asks the hook the
  quiz hands it (:func:`register_restore_hook`; ``import infralens_lab.quiz`` registers
  ``quiz.widgets.restore_self_checks``). A notebook the guard was loaded for before any hook was registered
  waits, and is restored the moment one is.

``make lab`` loads the extension when each kernel starts, so the guidance works right after a
restart, before any cell ran; ``import infralens_lab.quiz`` (every lab's set-up cell) also calls
:func:`install`, for a plain ``jupyter lab``. Outside IPython nothing happens. A ground-floor module: it
imports the standard library only, never the quiz (``tests/test_layers.py``), so no import circle can form.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import json
import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ANSWER_RE = re.compile(r"^ANSWER_\w+$")
GRADE_ENV = "INFRALENS_GRADE"  # set by `make grade` for the notebooks it runs (quiz.check reads it too)


def grade_mode() -> bool:
    """True when ``$INFRALENS_GRADE`` is 1/true/yes/on: this kernel runs a notebook for ``make grade`` (read at every
    call, so a kernel inherits it)."""
    return os.environ.get(GRADE_ENV, "").strip().lower() in ("1", "true", "yes", "on")
_NAME_IN_MESSAGE = re.compile(r"name '([^']+)' is not defined")
FIRST_LINE_CHARS = 60  # the defining cell's first line is quoted up to this many characters

# answer variable -> why its last assignment did not run (see _post_run_cell)
_not_run: dict[str, NotRun] = {}
_pending: dict[str, int] = {}  # answer variables the running cell assigns -> last line of that assignment


@dataclass(frozen=True)
class NotRun:
    """An answer cell's last run that stopped before its answer was assigned."""

    variable: str
    error: str   # exception class name, e.g. "SyntaxError"
    line: int | None  # 1-based line in the cell, when known

    def sentence(self) -> str:
        at = f" at line {self.line}" if self.line else ""
        return (f"your last edit of the answer cell did not run ({self.error}{at}), so {self.variable} still holds "
                "the value from before")


# ---------------------------------------------------------------- the cells of a notebook
@dataclass(frozen=True)
class Cell:
    """One code cell as the guard sees it: its position, source, the heading above it, the names it defines."""

    index: int       # among the notebook's code cells
    source: str
    heading: str     # the nearest markdown heading above, "" if none
    names: frozenset

    @property
    def first_line(self) -> str:
        for line in self.source.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                s = line.strip()
                return s if len(s) <= FIRST_LINE_CHARS else s[:FIRST_LINE_CHARS - 1] + "…"
        return ""


def _python_of(source: str) -> str:
    """``source`` with IPython syntax (``%magic``, ``!cmd``) turned into Python, as the kernel runs it."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager  # optional: IPython, only here
    except ImportError:  # plain python: drop the lines IPython would have transformed
        return "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    try:
        return TransformerManager().transform_cell(source)
    except (SyntaxError, ValueError):
        return source


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def defined_names(source: str) -> frozenset:
    """Names a code cell binds in the notebook's namespace: assignments, imports, ``def``/``class``,
    ``for``/``with`` targets (not names local to a function or comprehension). Empty if it does not parse."""
    try:
        tree = ast.parse(_python_of(source))
    except SyntaxError:
        return frozenset()
    names: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            return
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
            return
        if isinstance(node, _SCOPES):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return frozenset(names)


_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def read_cells(path: str | Path) -> list[Cell]:
    """The code cells of notebook ``path`` (cached by modification time); [] if it cannot be read."""
    p = Path(path)
    try:
        key = (str(p.resolve()), p.stat().st_mtime_ns)
    except OSError:
        return []
    if key not in _cells_cache:
        try:
            nb = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        cells, heading = [], ""
        for c in nb.get("cells", []):
            src = c.get("source", "")
            src = "".join(src) if isinstance(src, list) else str(src)
            if c.get("cell_type") == "markdown":
                found = _HEADING.findall(src)
                heading = re.sub(r"[*_`]", "", found[-1]).strip() if found else heading
            elif c.get("cell_type") == "code":
                cells.append(Cell(len(cells), src, heading, defined_names(src)))
        _cells_cache[key] = cells
    return _cells_cache[key]


_cells_cache: dict[tuple, list[Cell]] = {}


def _session_notebook(shell=None) -> Path | None:
    """This kernel's notebook, as Jupyter names it (``JPY_SESSION_NAME``, ipykernel's ``__session__``)."""
    named = os.environ.get("JPY_SESSION_NAME") or (shell.user_ns.get("__session__") if shell is not None else None)
    if named and str(named).endswith(".ipynb") and Path(named).is_file():
        return Path(named)
    return None


def _other_notebooks() -> list[Path]:
    """The working folder's notebooks and the repository's ``labs/``: where a cell may come from when
    Jupyter did not say which notebook this kernel runs."""
    out: list[Path] = []
    for folder in (Path.cwd(), Path(__file__).resolve().parents[1] / "labs"):
        with contextlib.suppress(OSError):
            out += sorted(folder.glob("*.ipynb"))
    return out


def find_definition(name: str, cells: list[Cell], current: str | None) -> tuple[Cell, bool] | None:
    """The cell of ``cells`` to run before ``current`` (the source of the cell that failed) so that ``name``
    is defined: the nearest one above it, else the first one anywhere (never ``current`` itself); with
    whether ``current`` was found in ``cells``. None if no cell defines ``name``."""
    here = None
    if current is not None:
        same = [c for c in cells if c.source.strip() == current.strip()]
        here = same[0].index if same else None
    defs = [c for c in cells if name in c.names and c.index != here]
    if not defs:
        return None
    above = [c for c in defs if here is not None and c.index < here]
    return (above[-1] if above else defs[0]), here is not None


def guidance(name: str, current: str | None, shell=None) -> str | None:
    """One line saying which cell to run first so that ``name`` exists, or None when no cell of this notebook
    defines it (see the module docstring for how the notebook is found)."""
    session = _session_notebook(shell)
    found = None
    for path in ([session] if session else []) + _other_notebooks():
        hit = find_definition(name, read_cells(path), current)
        if hit is not None and (hit[1] or path == session):  # another notebook: only one holding this cell
            found = hit[0]
            break
    if found is None:
        return None
    where = f'under "{found.heading}", starting "{found.first_line}"' if found.heading else \
        f'starting "{found.first_line}"'
    if found.index == 0:
        return (f"NameError: {name} is not defined in this kernel yet. Run the set-up cell at the top first: "
                f"it defines {name} ({where}).")
    return (f"NameError: {name} is not defined in this kernel yet. Run the cell that defines it first ({where}), "
            "or Run > Run All Above Selected Cell.")


def _raised_in_notebook(shell, tb) -> bool:
    """True if the innermost frame of ``tb`` runs code of the notebook (its globals are the user namespace)."""
    last = None
    while tb is not None:
        last, tb = tb, tb.tb_next
    return last is not None and last.tb_frame.f_globals is shell.user_ns


def _on_name_error(shell, etype, value, tb, tb_offset=None):
    """IPython custom exception handler: the guidance line, or the usual traceback."""
    name = getattr(value, "name", None)
    if name is None:
        m = _NAME_IN_MESSAGE.search(str(value))
        name = m.group(1) if m else None
    line = None
    if name and not issubclass(etype, UnboundLocalError) and _raised_in_notebook(shell, tb):
        try:
            line = guidance(name, _current_cell(shell), shell)
        except (OSError, ValueError, RecursionError):  # the guidance is a courtesy: never hide the error
            line = None
    stb = [line] if line is not None else \
        shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    if _handler_output_shown():
        return stb
    shell._showtraceback(etype, value, stb)  # IPython 9 discards what a custom handler returns
    return None


def _handler_output_shown() -> bool:
    """Whether this IPython shows the traceback a custom exception handler returns (IPython 8 does;
    IPython 9's ``run_code`` drops it, so the handler shows it itself)."""
    global _SHOWN
    if _SHOWN is None:
        from IPython.core.interactiveshell import InteractiveShell  # optional: IPython, only here
        try:
            _SHOWN = "_showtraceback" in inspect.getsource(InteractiveShell.set_custom_exc)
        except (OSError, TypeError):
            _SHOWN = False
    return _SHOWN


_SHOWN: bool | None = None


def _current_cell(shell) -> str | None:
    """The source of the cell being run (IPython's input history)."""
    hist = getattr(getattr(shell, "history_manager", None), "input_hist_raw", None) or shell.user_ns.get("In") or []
    return hist[-1] if hist else None


# ---------------------------------------------------------------- answer cells that did not run
def _assignment_ends(source: str) -> dict[str, int]:
    """``{ANSWER_x: last line of its last assignment}`` in a cell; a cell that does not parse is read with
    a line pattern (its assignments never ran)."""
    try:
        tree = ast.parse(_python_of(source))
    except SyntaxError:
        pat = re.compile(r"^[ \t]*(ANSWER_\w+)\s*(?::[^=\n]*)?=(?!=)", re.M)
        return {m.group(1): source.count("\n", 0, m.start()) + 1 for m in pat.finditer(source)}
    ends: dict[str, int] = {}
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and ANSWER_RE.match(n.id):
                    ends[n.id] = max(ends.get(n.id, 0), node.end_lineno or node.lineno)
    return ends


def _pre_run_cell(info) -> None:
    _pending.clear()
    _pending.update(_assignment_ends(getattr(info, "raw_cell", "") or ""))
    for var in _pending:  # this cell assigns it again: an older failure no longer applies
        _not_run.pop(var, None)


def _cell_line(exc: BaseException, shell) -> int | None:
    """The line of the running cell at which ``exc`` left it (outermost frame in the user namespace)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals is shell.user_ns and tb.tb_frame.f_code.co_name == "<module>":
            return tb.tb_lineno
        tb = tb.tb_next
    return None


def _post_run_cell(result, shell=None) -> None:
    if not _pending:
        return
    before, during = getattr(result, "error_before_exec", None), getattr(result, "error_in_exec", None)
    for var, end in _pending.items():
        if before is not None:
            _not_run[var] = NotRun(var, type(before).__name__, getattr(before, "lineno", None))
        elif during is not None:
            line = _cell_line(during, shell) if shell is not None else None
            if line is not None and line <= end:
                _not_run[var] = NotRun(var, type(during).__name__, line)
    _pending.clear()


def answer_not_run(variable: str) -> NotRun | None:
    """Why the last cell that assigns ``variable`` stopped before assigning it, or None (it ran, or no
    such cell ran in this kernel, or the guard is not installed)."""
    return _not_run.get(variable)


# ---------------------------------------------------------------- install
def install(shell=None) -> bool:
    """Install the NameError guidance and the answer-cell record in ``shell`` (default: the running
    IPython); idempotent. Returns False outside IPython."""
    if shell is None:
        try:
            from IPython import get_ipython  # optional: IPython, only here
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None:
        return False
    if getattr(shell, "_infralens_guard", None) is not shell:
        post = lambda result: _post_run_cell(result, shell)  # noqa: E731 - bound to this shell
        shell.events.register("pre_run_cell", _pre_run_cell)
        shell.events.register("post_run_cell", post)
        shell._infralens_guard = shell
    if NameError not in getattr(shell, "custom_exceptions", ()):
        shell.set_custom_exc((NameError,), _on_name_error)
    return True


# ---------------------------------------------------------------- the quiz's hook
_restore_hook: Callable[[Path], object] | None = None  # set by register_restore_hook (the quiz, on import)
_restore_waiting: list[Path] = []  # notebooks the extension was loaded for before a hook was registered


def register_restore_hook(fn: Callable[[Path], object] | None) -> None:
    """Hand the guard the function that makes a notebook's saved self-checks live again (``fn(notebook_path)``;
    ``import infralens_lab.quiz`` registers ``quiz.widgets.restore_self_checks``), or ``None`` to drop it. A
    notebook waiting since the extension loaded without a hook is restored at once (a failure there is a warning:
    it runs inside the set-up cell's import, which must not fail for it). Raises TypeError when ``fn`` is neither
    callable nor None."""
    global _restore_hook
    if fn is not None and not callable(fn):
        raise TypeError(f"restore hook is {type(fn).__name__}; expected a callable taking a notebook path, or None")
    _restore_hook = fn
    while fn is not None and _restore_waiting:
        notebook = _restore_waiting.pop(0)
        try:
            fn(notebook)
        except Exception as exc:  # any failure of the hook: the import that registered it goes on
            warnings.warn(f"the saved self-checks of {notebook} were not restored ({type(exc).__name__}: {exc}); "
                          "expected them live again; run their cells to show them", stacklevel=2)


def load_ipython_extension(shell) -> None:
    """``--ext=infralens_lab.notebook_guard`` (``make lab``) or ``%load_ext``: install, then make the saved
    self-checks of this session's notebook live again through the registered hook (or as soon as one is)."""
    install(shell)
    session = _session_notebook(shell)
    if session is None:
        return
    if _restore_hook is None:
        _restore_waiting.append(session)
    else:
        _restore_hook(session)


__all__ = ["NotRun", "answer_not_run", "defined_names", "find_definition", "guidance", "install",
           "load_ipython_extension", "read_cells", "register_restore_hook"]
