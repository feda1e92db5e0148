"""environment.yml installs what pyproject.toml declares, so conda users get the same labs; the wheel carries the
recorded evidence, and a lab runs from it in a fresh venv."""
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda-forge name where they differ
PIP_ONLY = {"playwright", "holistictraceanalysis"}  # from PyPI through the pip section's `-e .[test]`


def _split(req: str) -> tuple[str, str]:
    name, spec = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(.*)", req).groups()
    return name.lower(), spec.replace(" ", "")


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = dict(_split(d) for d in env["dependencies"] if isinstance(d, str))
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == ["-e .[test]"]
    assert conda["python"] == project["requires-python"]
    wanted = [_split(r) for r in project["dependencies"] + project["optional-dependencies"]["test"]]
    for name, spec in wanted:
        if name in PIP_ONLY:
            continue
        got = conda.get(CONDA_NAMES.get(name, name))
        assert got == spec, f"environment.yml has {CONDA_NAMES.get(name, name)}{got or ' (missing)'}, " \
                            f"pyproject.toml has {name}{spec}"


def test_every_recorded_set_ships_with_the_wheel():
    """pyproject's data-files name every folder under data/recorded (and DEFAULT), so a wheel carries them."""
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    shipped = {k.rsplit("/", 1)[-1] for k in files} - {"recorded"}
    sets = {p.name for p in (ROOT / "data" / "recorded").iterdir() if p.is_dir()}
    assert sets <= shipped, f"add to [tool.setuptools.data-files] in pyproject.toml: {sorted(sets - shipped)}"
    assert "data/recorded/DEFAULT" in files["share/infralens_lab/recorded"]


def _clean_env() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith(("INFRALENS_", "PYTHON", "PIP_"))}


def _run(*cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, env=kw.pop("env", _clean_env()), timeout=300, **kw)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The package's wheel, built (no isolation, no deps: nothing from the network) from a copy of the source."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "infralens_lab", src / "infralens_lab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "data" / "recorded", src / "data" / "recorded")
    r = _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp / "dist"),
             str(src))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return next((tmp / "dist").glob("infralens_lab-*.whl"))


def test_a_wheel_installed_elsewhere_loads_the_reference(tmp_path, wheel):
    """Install the wheel (no deps) into a fresh venv that sees the system site-packages, and load the recorded
    reference set from outside any checkout."""
    venv = tmp_path / "venv"
    r = _run(sys.executable, "-m", "venv", "--system-site-packages", str(venv))
    assert r.returncode == 0, r.stderr[-2000:]
    py = venv / "bin" / "python"
    r = _run(str(py), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", str(wheel))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    probe = ("from infralens_lab import evidence; st = evidence.reference(); "
             "print(evidence.data_root()); print(st.gpu); print(sorted(st.names())[:2])")
    r = _run(str(py), "-c", probe, cwd=str(tmp_path))  # cwd outside the checkout: nothing imported from ROOT
    assert r.returncode == 0, r.stderr[-3000:]
    root, gpu, names = r.stdout.splitlines()[:3]
    assert root.startswith(str(venv)) and root.endswith("share/infralens_lab/recorded")
    assert gpu.startswith("NVIDIA") and names != "[]"


def test_lab00_passes_nbval_from_the_wheel_in_a_fresh_venv(tmp_path, wheel):
    """Issue 43, the Colab path: a fresh venv gets the package from the built wheel, not the editable checkout;
    lab 00, copied (with the other labs, whose metadata its first cell lists) to a folder outside the repository,
    passes nbval there (in interpreter mode without a GPU, as the lab was executed), its setup cell a
    no-op and its recorded evidence read from inside the installed package. The venv has no pip and no packages
    of its own: a .pth line adds this test venv's site-packages (torch, Jupyter, nbval) after its own; Python
    does not read the .pth files of a folder a .pth line adds, so the checkout's editable finder stays out."""
    fresh = tmp_path / "fresh"
    r = _run(sys.executable, "-m", "venv", "--without-pip", str(fresh))
    assert r.returncode == 0, r.stderr[-2000:]
    purelib = sysconfig.get_paths()["purelib"]  # this venv's site-packages (the test's interpreter)
    fresh_lib = fresh / Path(purelib).relative_to(sys.prefix)
    (fresh_lib / "zz_test_venv.pth").write_text(purelib + "\n")
    # --ignore-installed: without it pip, run from this venv, first uninstalls the package it finds installed
    # here (the checkout's editable install) before writing the wheel under --prefix, and every later kernel of
    # the test session then fails to import infralens_lab
    r = _run(sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "--prefix",
             str(fresh), str(wheel))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "uninstall" not in (r.stdout + r.stderr).lower(), r.stdout[-2000:]
    r = _run(sys.executable, "-c", "import infralens_lab; print(infralens_lab.__file__)", cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.strip() == str(ROOT / "infralens_lab" / "__init__.py"), \
        f"installing the wheel under --prefix changed this venv's infralens_lab: {r.stdout} {r.stderr[-1000:]}"
    py = str(fresh / "bin" / "python")
    run_dir = tmp_path / "elsewhere" / "labs"  # lab 00's first cell lists the lab notebooks beside it: all of them
    run_dir.mkdir(parents=True)
    probe = "import infralens_lab; from infralens_lab import evidence; print(infralens_lab.__file__); print(evidence.data_root())"
    r = _run(py, "-c", probe, cwd=str(run_dir))
    assert r.returncode == 0, r.stderr[-3000:]
    where, data = r.stdout.splitlines()[:2]
    assert where.startswith(str(fresh_lib)) and data == str(fresh / "share" / "infralens_lab" / "recorded"), r.stdout
    for lab in (ROOT / "labs").glob("[0-9][0-9]_*.ipynb"):  # the others are only read for their metadata
        shutil.copy(lab, run_dir)
    shutil.copy(ROOT / "tests" / "nbval_sanitize.cfg", run_dir)
    # mode auto, as `make notebooks` executed the committed lab: the interpreter on a machine without a GPU
    r = _run(py, "-m", "pytest", "00_start_here.ipynb", "--nbval", "--nbval-current-env", "--nbval-sanitize-with",
             "nbval_sanitize.cfg", "-p", "no:cacheprovider", "-q", cwd=str(run_dir))
    assert r.returncode == 0 and " passed" in r.stdout, r.stdout[-6000:] + r.stderr[-2000:]
