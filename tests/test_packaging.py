"""environment.yml installs what pyproject.toml declares, so conda users get the same labs."""
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda-forge name where they differ
PIP_ONLY = {"playwright"}  # comes from PyPI through the pip section's `-e .[test]`


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
