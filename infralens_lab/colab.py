"""Running the labs where the package is not installed yet (Google Colab, Kaggle, a bare Jupyter).

One owner for what such a run needs: the repository the labs are published from (:data:`REPOSITORY`, the one
place to change it), the "Open in Colab" link of each lab (:func:`colab_url`), the optional setup cell every lab
begins with (:func:`setup_cells`; ``tools/setup_cell.py`` writes it into the labs), and whether this kernel runs
in a hosted notebook service (:func:`hosted`). Standard library only: the setup cell runs before the package is
importable, and the doctor asks :func:`hosted` without Jupyter.
"""
from __future__ import annotations

import importlib
import os
import sys

# The GitHub repository (owner/name) the labs are published from, and its branch. The Colab links, the setup
# cell's `%pip install` and the README's "Run it on Colab" list are all built from these two names.
REPOSITORY = "infralens/infralens-lab"
BRANCH = "main"
SETUP_TAG = "setup"  # the tag of the two setup cells (their markdown line and the install cell)
SETUP_MARKDOWN = ("*On Colab, Kaggle or a bare Jupyter:* the next cell installs `infralens_lab` from its repository "
                  "when it is missing; where it is installed (`make lab`, the grader) it does nothing.")


def repository_url() -> str:
    """The repository's web address, ``https://github.com/<owner>/<name>``."""
    return f"https://github.com/{REPOSITORY}"


def install_spec() -> str:
    """What ``pip install`` is given to install the package from the repository (a PEP 508 direct reference)."""
    return f"infralens_lab @ git+{repository_url()}@{BRANCH}"


def colab_url(lab: str) -> str:
    """The "Open in Colab" address of one lab, e.g. ``colab_url("00_start_here.ipynb")``: Colab opens the
    notebook as committed on :data:`BRANCH` (outputs included)."""
    if not isinstance(lab, str) or "/" in lab or not lab.endswith(".ipynb"):
        raise ValueError(f"lab {lab!r}; expected a notebook file name in labs/, e.g. '00_start_here.ipynb'")
    return f"https://colab.research.google.com/github/{REPOSITORY}/blob/{BRANCH}/labs/{lab}"


def setup_source() -> str:
    """The setup cell's code: a no-op (prints nothing, installs nothing) where ``infralens_lab`` imports."""
    return ("import importlib.util  # Colab, Kaggle, a bare Jupyter: install the package when it is missing\n"
            "\n"
            'if importlib.util.find_spec("infralens_lab") is None:\n'
            f'    %pip install -q "{install_spec()}"')


def setup_cells() -> list[dict]:
    """The two cells every lab begins with, as notebook cells (nbformat 4): the markdown line, then the code."""
    return [{"cell_type": "markdown", "id": "infralens-setup-note", "metadata": {"tags": [SETUP_TAG]},
             "source": SETUP_MARKDOWN},
            {"cell_type": "code", "execution_count": None, "id": "infralens-setup", "metadata": {"tags": [SETUP_TAG]},
             "outputs": [], "source": setup_source()}]


def hosted() -> str | None:
    """The hosted notebook service this process runs in (``"Google Colab"``, ``"Kaggle"``), or None. Read from
    the variables each sets in its kernels (``COLAB_RELEASE_TAG``, ``KAGGLE_KERNEL_RUN_TYPE``) and, for Colab,
    from ``google.colab`` having been imported (Colab's kernel imports it at start)."""
    if os.environ.get("COLAB_RELEASE_TAG") or os.environ.get("COLAB_GPU") is not None or "google.colab" in sys.modules:
        return "Google Colab"
    if os.environ.get("KAGGLE_KERNEL_RUN_TYPE") or os.environ.get("KAGGLE_URL_BASE"):
        return "Kaggle"
    return None


def enable_colab_widgets() -> str | None:
    """In Colab, turn on its custom widget manager (ipywidgets 8 renders only through it). Returns None when
    widgets can render (not Colab, or enabled now), else the reason they cannot (the self-checks then print)."""
    if "google.colab" not in sys.modules and not os.environ.get("COLAB_RELEASE_TAG"):
        return None
    try:
        output = importlib.import_module("google.colab.output")
        if _enabled.get("output") is not output:  # once per kernel (per module object: tests stand in new ones)
            output.enable_custom_widget_manager()
            _enabled["output"] = output
    except Exception as exc:  # any failure means the same: Colab will not render these widgets
        return f"Colab's custom widget manager could not be enabled ({type(exc).__name__}: {exc})"
    return None


_enabled: dict = {}  # the google.colab.output module whose custom widget manager this kernel turned on
