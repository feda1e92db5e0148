"""Importing this module keeps ``jsonschema`` (which nbformat imports) from importing its optional IRI format
check, ``rfc3987_syntax``: that package builds a grammar at import, about 4 s of a 2-core machine, for a format
nbformat's notebook schema never uses. Import it (or call :func:`skip_iri_grammar`) before nbformat is first
imported: the grader calls it (each notebook's runner, a script that imports nothing of the package, keeps a
copy that a test holds equal); ``make test`` loads it as the first pytest plugin
(``-p infralens_lab.quick_nbformat`` in pyproject's addopts), before nbval's plugin imports nbformat, so that no
pytest process (the controller and each xdist worker) pays for the grammar."""
from __future__ import annotations

import sys


def skip_iri_grammar() -> None:
    """Mark ``rfc3987_syntax`` as absent (``sys.modules`` entry None) unless it is already imported: jsonschema then
    leaves the "iri" format unchecked, as when the package is not installed."""
    sys.modules.setdefault("rfc3987_syntax", None)


skip_iri_grammar()
