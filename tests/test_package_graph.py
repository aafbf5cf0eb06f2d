"""The top-level packages import each other in one direction only.

Read from the source, not from import-linter's graph: every `import` and `from ... import` of
every module (inside functions and under `TYPE_CHECKING` too, relative imports resolved) becomes
an edge between two top-level packages. The layers, from the top:

    bench  >  outpost  >  bridge | storage  >  gateway          cloud_spark imports none of them

An edge is allowed only from a higher layer to a lower one; `bridge` and `storage` share a layer
and do not import each other; `cloud_spark` imports none of ours, and only `bench` imports it.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RANK = {"bench": 3, "outpost": 2, "bridge": 1, "storage": 1, "gateway": 0}
CLOUD = "cloud_spark"
PACKAGES = (*RANK, CLOUD)


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level == 0:
        return [node.module or ""]
    # `from . import x` in a.b.c (a module) is a.b; in a.b (a package's __init__) it is a.b.
    base = module.split(".")
    drop = node.level - 1 if is_package else node.level
    anchor = base[: len(base) - drop]
    return [".".join([*anchor, node.module] if node.module else anchor)]


def package_edges(root: Path) -> dict[tuple[str, str], list[str]]:
    """Every edge between two of our top-level packages, with the modules that make it."""
    edges: dict[tuple[str, str], list[str]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            module = _module_name(root, path)
            is_package = path.name == "__init__.py"
            for node in ast.walk(ast.parse(path.read_text("utf-8"))):
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                for target in _imported(node, module, is_package):
                    top = target.split(".")[0]
                    if top in PACKAGES and top != package:
                        edges.setdefault((package, top), []).append(f"{module}:{node.lineno}")
    return edges


def upward(edges: dict[tuple[str, str], list[str]]) -> dict[tuple[str, str], list[str]]:
    """The edges that break the layers."""
    def allowed(source: str, target: str) -> bool:
        if CLOUD in (source, target):
            return source == "bench"
        return RANK[source] > RANK[target]

    return {edge: where for edge, where in edges.items() if not allowed(*edge)}


def test_no_package_imports_a_package_above_it() -> None:
    edges = package_edges(ROOT)
    assert upward(edges) == {}
    # The layers are really used, top to bottom (a test that finds no edge at all proves nothing).
    assert {("outpost", "bridge"), ("outpost", "storage"), ("outpost", "gateway"),
            ("bridge", "gateway"), ("storage", "gateway"), ("bench", "outpost")} <= set(edges)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def test_an_injected_upward_import_is_caught(tree: Path) -> None:
    # The broker naming the appliance's config for a type hint only, and storage reaching up
    # to the appliance from inside a function: both are edges that point up.
    hint = tree / "gateway/broker/engine/links.py"
    hint.write_text(hint.read_text() + "\nfrom typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from outpost.config import Config\n")
    late = tree / "storage/memory.py"
    late.write_text(late.read_text() + "\ndef _late() -> None:\n    import outpost.status\n")
    bridge = tree / "bridge/point.py"
    bridge.write_text(bridge.read_text() + "\nfrom outpost import __version__\n")

    found = upward(package_edges(tree))

    assert set(found) == {("gateway", "outpost"), ("storage", "outpost"), ("bridge", "outpost")}
    assert found[("gateway", "outpost")] == [f"gateway.broker.engine.links:{_last_line(hint)}"]


def test_the_cloud_package_importing_the_gateway_is_caught(tree: Path) -> None:
    records = tree / "cloud_spark/records.py"
    records.write_text(records.read_text() + "\nimport gateway.base.hostport\n")
    assert set(upward(package_edges(tree))) == {("cloud_spark", "gateway")}


def _last_line(path: Path) -> int:
    return len(path.read_text().splitlines())
