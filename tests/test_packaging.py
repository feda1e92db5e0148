"""environment.yml installs what pyproject.toml declares, so conda users get the same labs."""
import re
import tomllib
from pathlib import Path

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


def test_a_wheel_installed_elsewhere_loads_the_reference(tmp_path):
    """Build the wheel from a copy of the source, install it (no deps) into a fresh venv that sees the
    system site-packages, and load the recorded reference set from outside any checkout."""
    import os
    import shutil
    import subprocess
    import sys

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "infralens_lab", src / "infralens_lab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "data" / "recorded", src / "data" / "recorded")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("INFRALENS_", "PYTHON", "PIP_"))}
    run = lambda *cmd, **kw: subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, **kw)  # noqa: E731 (a short local helper)
    r = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"),
            str(src))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("infralens_lab-*.whl"))
    venv = tmp_path / "venv"
    r = run(sys.executable, "-m", "venv", "--system-site-packages", str(venv))
    assert r.returncode == 0, r.stderr[-2000:]
    py = venv / "bin" / "python"
    r = run(str(py), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", str(wheel))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    probe = ("from infralens_lab import evidence; st = evidence.reference(); "
             "print(evidence.data_root()); print(st.gpu); print(sorted(st.names())[:2])")
    r = run(str(py), "-c", probe, cwd=str(tmp_path))  # cwd outside the checkout: nothing imported from ROOT
    assert r.returncode == 0, r.stderr[-3000:]
    root, gpu, names = r.stdout.splitlines()[:3]
    assert root.startswith(str(venv)) and root.endswith("share/infralens_lab/recorded")
    assert gpu.startswith("NVIDIA") and names != "[]"
