"""Every third-party import of the product is declared where it is needed.

The device's virtualenv is built from `[project] dependencies` alone (image/build.sh), so an
import that only the dev extra happens to install would work in every test here and fail on
the device. Each package's imports are read from its source (function-level imports too) and
mapped to their distributions; each must be declared in the requirement list that installs
that package's code.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
OURS = {"outpost", "gateway", "bridge", "storage", "cloud_spark"}

# Which requirement lists install which code: the device runs [project] dependencies; the
# cloud machines add the cloud extra; `outpost demo` adds the demo extra.
PROJECT = PYPROJECT["project"]["dependencies"]
EXTRAS = PYPROJECT["project"]["optional-dependencies"]
SCOPES = {
    "outpost": PROJECT,
    "gateway": PROJECT,
    "bridge": PROJECT,
    "storage": PROJECT,
    "outpost/demo": PROJECT + EXTRAS["demo"],
    "cloud_spark": PROJECT + EXTRAS["cloud"],
}
# Imports that are optional at run time, each guarded where it is imported.
OPTIONAL = {
    "systemd": "the systemd extra; the daemon falls back to its own senders without it",
}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def _imports(folder: Path, skip: tuple[Path, ...] = ()) -> set[str]:
    found: set[str] = set()
    for path in folder.rglob("*.py"):
        if any(path.is_relative_to(s) for s in skip):
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return found - OURS - set(sys.stdlib_module_names) - {"__future__"}


@pytest.mark.parametrize("scope", sorted(SCOPES))
def test_every_third_party_import_is_declared(scope: str) -> None:
    folder = ROOT / scope
    nested = tuple(ROOT / other for other in SCOPES if other != scope
                   and (ROOT / other).is_relative_to(folder))
    declared = {_name(r) for r in SCOPES[scope]}
    distributions = packages_distributions()
    missing = []
    for module in sorted(_imports(folder, nested)):
        if module in OPTIONAL:
            continue
        names = {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        if not names & declared:
            missing.append(f"{module} (from {', '.join(sorted(names))})")
    assert not missing, f"{scope} imports undeclared packages: {missing}"


def test_the_image_installs_exactly_the_project_dependencies() -> None:
    build = (ROOT / "image" / "build.sh").read_text("utf-8")
    assert '["project"]["dependencies"]' in build
    assert not (ROOT / "image" / "requirements.txt").exists(), "one list: pyproject.toml"


# The device families' client libraries: dependencies of every gateway, loaded only when a
# device of their family is opened (bridge/families.py), so a gateway without such devices
# starts as fast and as small as before they were added.
FAMILY_LIBRARIES = ("asyncua", "snap7", "pycomm3")


def test_start_up_loads_no_device_familys_library() -> None:
    declared = {_name(r) for r in PROJECT}
    assert {"asyncua", "python-snap7", "pycomm3"} <= declared
    # what `outpost run` imports before it opens a device: the app, the bridge with every
    # family registered, the console that renders every family's forms
    code = ("import sys, outpost.cli, outpost.app, outpost.console, bridge.families, "
            "bridge.runtime, bridge.catalog\n"
            "from bridge.families import registered\n"
            "from bridge.catalog import entries\n"
            "[entry.schema() for entry in entries(registered(None))]\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(FAMILY_LIBRARIES)!r}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, check=True)
    assert result.stdout.strip() == "[]", result.stdout + result.stderr
