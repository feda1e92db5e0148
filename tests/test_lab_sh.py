"""tools/lab.sh (what `make lab` runs), up to the point where it would start JupyterLab: the
working copy is made once and never overwritten, new labs are copied in, the banner says where
the notebooks are, the URL, the SSH tunnel on a remote machine and the port used when the one
asked for is taken; root gets --allow-root; the shipped settings are used. The browser test
starts the real server through the same script."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

LABS = sorted(p.name for p in (ROOT / "labs").iterdir() if p.is_file())
VENV = Path(sys.executable).parent.parent


def lab_sh(work: Path, port: int, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "SSH_CONNECTION"}
    e.update(INFRALENS_WORK_DIR=str(work), PORT=str(port), INFRALENS_LAB_DRY_RUN="1",
             JUPYTER_DATA_DIR=str(work.parent / "jupyter-data"), **env)  # lab.sh signs its copies there
    r = subprocess.run(["bash", str(ROOT / "tools" / "lab.sh"), str(VENV)], env=e, capture_output=True,
                       text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return r


def _command(out: str) -> str:
    """The JupyterLab command line a dry run names (it is printed before the banner)."""
    return next(line for line in out.splitlines() if line.startswith("would run: "))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """One dry run of lab.sh into an empty working copy, shared by the tests that read what a first run makes and
    prints: (working copy, stdout, port asked for). A test that changes the copy works on :func:`copy_of` it."""
    work = tmp_path_factory.mktemp("fresh") / "my-labs"
    port = _free_port()
    return work, lab_sh(work, port).stdout, port


def copy_of(fresh, dest: Path) -> Path:
    """A copy of the fresh working copy (its signatures too, in the jupyter-data folder beside it) at ``dest``;
    lab.sh run on it finds every lab already there, as on a learner's second `make lab`."""
    import shutil

    work = fresh[0]
    shutil.copytree(work, dest / work.name)
    shutil.copytree(work.parent / "jupyter-data", dest / "jupyter-data")
    return dest / work.name


@pytest.mark.skipif(not LABS, reason="no labs/ committed")
def test_working_copy_is_made_once_and_never_overwritten(fresh, tmp_path):
    work, first, _ = fresh
    assert f"your notebooks: {work}" in first and "git-ignored" in first
    assert sorted(p.name for p in work.iterdir() if not p.name.startswith(".")) == LABS
    assert "copied in now: " + " ".join(LABS) in first
    work = copy_of(fresh, tmp_path)
    mine = work / LABS[0]
    mine.write_text("my answers")          # a learner's edit
    (work / LABS[-1]).unlink()             # stands in for a lab added to labs/ later
    again = lab_sh(work, _free_port()).stdout
    assert mine.read_text() == "my answers"
    assert f"copied in now: {LABS[-1]}" in again
    import json
    copied, committed = (json.loads((d / LABS[-1]).read_text()) for d in (work, ROOT / "labs"))
    assert [c["source"] for c in copied["cells"]] == [c["source"] for c in committed["cells"]]


@pytest.mark.skipif(not any(n.endswith(".ipynb") for n in LABS), reason="no notebooks in labs/")
def test_working_copy_carries_no_answer_output(fresh):
    """make lab's copies: the answer, exercise, worked-solution and predict-then-look cells have no output (nor an
    execution count); every other cell keeps its committed outputs, so the evidence is still on the page."""
    import json

    from infralens_lab.quiz.cells import CLEARED_TAGS

    work = fresh[0]
    cleared = kept = 0
    for name in (n for n in LABS if n.endswith(".ipynb")):
        mine = json.loads((work / name).read_text())["cells"]
        theirs = json.loads((ROOT / "labs" / name).read_text())["cells"]
        assert len(mine) == len(theirs), name
        for i, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            if a["cell_type"] != "code":
                continue
            if set(a["metadata"].get("tags", [])) & set(CLEARED_TAGS):
                assert a["outputs"] == [] and a["execution_count"] is None, f"{name} cell {i} still shows {a['outputs'][:1]}"
                cleared += bool(b["outputs"])
            else:
                assert a["outputs"] == b["outputs"], f"{name} cell {i}: evidence output changed in the copy"
                kept += bool(b["outputs"])
    assert cleared > 20 and kept > 50, (cleared, kept)  # the labs' answer cells did have outputs to clear


@pytest.mark.skipif(not any(n.endswith(".ipynb") for n in LABS), reason="no notebooks in labs/")
def test_new_copies_are_signed_and_a_learners_notebook_is_left_alone(fresh, tmp_path):
    """The copies lab.sh makes carry the project's committed outputs: it signs them (JupyterLab then keeps their
    tables' styles on first open); a notebook already in the working copy, the learner's, is never signed by it."""
    nbformat = pytest.importorskip("nbformat")
    from nbformat.sign import NotebookNotary

    notebooks = sorted(p for p in fresh[0].glob("*.ipynb"))
    first = NotebookNotary(data_dir=str(fresh[0].parent / "jupyter-data"))
    assert notebooks and all(first.check_signature(nbformat.read(p, as_version=4)) for p in notebooks)
    work = copy_of(fresh, tmp_path)
    notary = NotebookNotary(data_dir=str(tmp_path / "jupyter-data"))
    notebooks = sorted(p for p in work.glob("*.ipynb"))
    mine = nbformat.read(notebooks[0], as_version=4)
    mine.cells[0].source += "\n# my note"           # the learner's edit, saved outside JupyterLab: not signed
    nbformat.write(mine, notebooks[0])
    (work / notebooks[-1].name).unlink()             # stands in for a lab added to labs/ later
    lab_sh(work, _free_port())
    assert not notary.check_signature(nbformat.read(notebooks[0], as_version=4))
    assert notary.check_signature(nbformat.read(work / notebooks[-1].name, as_version=4))

def test_url_root_flag_settings_and_no_tunnel_locally(fresh):
    work, out, port = fresh
    assert re.search(rf"open: http://localhost:{port}/lab/tree/00_start_here\.ipynb\?token=[0-9a-f]{{48}}", out)
    cmd = _command(out)
    assert f"--ServerApp.port={port}" in cmd and f"--ServerApp.root_dir={work}" in cmd
    assert f"--LabApp.app_settings_dir={ROOT}/tools/jupyter/settings" in cmd
    assert ("--allow-root" in cmd) == (os.geteuid() == 0)
    assert "ssh -N -L" not in out and "is taken" not in out


def test_remote_machine_gets_the_tunnel_line(fresh, tmp_path):
    port = _free_port()
    out = lab_sh(copy_of(fresh, tmp_path), port, SSH_CONNECTION="203.0.113.9 50022 198.51.100.7 22").stdout
    user = subprocess.run(["id", "-un"], capture_output=True, text=True).stdout.strip()
    assert f"ssh -N -L {port}:localhost:{port} {user}@198.51.100.7" in out


def test_taken_port_is_named_and_the_next_one_used(fresh, tmp_path):
    work = copy_of(fresh, tmp_path)
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = lab_sh(work, port).stdout
    used = int(re.search(r"open: http://localhost:(\d+)/", out).group(1))
    assert used > port and f"port {port} is taken; using port {used}" in out


def test_shipped_settings_turn_the_news_off():
    import json

    overrides = json.loads((ROOT / "tools" / "jupyter" / "settings" / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    schema = VENV / "share" / "jupyter" / "lab" / "schemas" / "@jupyterlab" / "apputils-extension" / "notification.json"
    if schema.exists():  # the setting exists under that name in this JupyterLab
        assert "fetchNews" in json.loads(schema.read_text())["properties"]


def test_kernels_start_with_the_notebook_guard_and_custom_css_is_served(fresh):
    """The kernelspec lab.sh writes is the usual ipykernel plus the guard extension, first on JUPYTER_PATH
    (so it stands in for "python3"); JupyterLab gets the repo's custom CSS (output wraps between words)."""
    import json

    work, out, _ = fresh
    spec = json.loads((work / ".infralens" / "jupyter" / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][:3] == [str(VENV / "bin" / "python"), "-m", "ipykernel_launcher"]
    assert "--ext=infralens_lab.quiz" in spec["argv"] and "{connection_file}" in spec["argv"]
    cmd = _command(out)
    assert "--LabApp.custom_css=True" in cmd
    assert f"--ServerApp.tornado_settings=static_custom_path={ROOT}/tools/jupyter/custom" in cmd
    css = (ROOT / "tools" / "jupyter" / "custom" / "custom.css").read_text()
    assert "word-break: normal" in css and "overflow-wrap: anywhere" in css


def test_shipped_settings_save_widget_state():
    import json

    overrides = json.loads((ROOT / "tools" / "jupyter" / "settings" / "overrides.json").read_text())
    assert overrides["@jupyter-widgets/jupyterlab-manager:plugin"]["saveState"] is True
    schema = (VENV / "share" / "jupyter" / "labextensions" / "@jupyter-widgets" / "jupyterlab-manager" / "schemas"
              / "@jupyter-widgets" / "jupyterlab-manager" / "plugin.json")
    if schema.exists():  # the setting exists under that name in this widget manager
        assert "saveState" in json.loads(schema.read_text())["properties"]


def test_the_url_is_printed_last_and_opens_lab_00(fresh):
    """The URL is the last line (the server's own log goes to a file, so nothing follows it), and it opens
    00_start_here.ipynb, which the working copy has, rather than the Launcher; the server log is named."""
    assert (ROOT / "labs" / "00_start_here.ipynb").is_file()
    work, out, port = fresh
    lines = out.strip().splitlines()
    assert re.fullmatch(rf"  open: http://localhost:{port}/lab/tree/00_start_here\.ipynb\?token=[0-9a-f]{{48}}", lines[-1])
    assert (work / "00_start_here.ipynb").is_file()
    assert f"  server log: {work}/.infralens/jupyter.log" in lines and "  stop: Ctrl-C" in lines
    assert lines[0].startswith("would run: ")  # the server starts first; the banner follows once it answers


def test_remote_machine_gets_the_tunnel_just_above_the_url(fresh, tmp_path):
    port = _free_port()
    lines = lab_sh(copy_of(fresh, tmp_path), port, SSH_CONNECTION="203.0.113.9 50022 198.51.100.7 22").stdout.strip().splitlines()
    assert "ssh -N -L" in lines[-3] and "then open the URL below there" in lines[-2]
    assert lines[-1].startswith(f"  open: http://localhost:{port}/lab/tree/00_start_here.ipynb?token=")
