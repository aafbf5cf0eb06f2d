"""The import-linter contracts of pyproject.toml hold on the tree and catch what they forbid.

Each test copies the product packages and pyproject.toml into a temporary directory, breaks one
rule there (an upward import, a cycle, a module outside every layer) and runs the real
`lint-imports` on the copy: the contract for that rule, and only it, must be reported broken.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("bench", "outpost", "gateway", "bridge", "storage", "cloud_spark")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
CONTRACTS = {
    contract["id"]: contract["name"]
    for contract in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"][
        "contracts"
    ]
}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the product packages and pyproject.toml."""
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def broken_contracts(tree: Path) -> set[str]:
    """Run lint-imports on `tree`; the ids of the contracts it reports broken."""
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "300"}
    result = subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True,
        timeout=300, check=False,
    )
    output = result.stdout + result.stderr
    broken = {cid for cid, name in CONTRACTS.items()
              if re.search(rf"^{re.escape(name)} BROKEN", output, re.MULTILINE)}
    kept = {cid for cid, name in CONTRACTS.items()
            if re.search(rf"^{re.escape(name)} KEPT", output, re.MULTILINE)}
    assert broken | kept == set(CONTRACTS), output  # every contract ran
    assert (result.returncode != 0) == bool(broken), output
    return broken


def add_line(path: Path, line: str) -> None:
    """Append an import to a module of the copy."""
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_contracts_hold_on_the_tree(tree: Path) -> None:
    assert broken_contracts(tree) == set()


def test_the_broker_importing_storage_breaks_the_layers(tree: Path) -> None:
    add_line(tree / "gateway/broker/engine/links.py", "import storage.memory")
    # ... and through the broker, the bridge now reaches storage.
    assert broken_contracts(tree) == {"packages", "broker-alone", "bridge-storage"}


def test_base_importing_the_broker_breaks_the_layers(tree: Path) -> None:
    add_line(tree / "gateway/base/hostport.py", "import gateway.broker.codec")
    # The broker imports base: the way back is also a cycle.
    assert broken_contracts(tree) == {"gateway", "no-cycles"}


def test_the_codec_importing_the_engine_breaks_the_broker_layers(tree: Path) -> None:
    add_line(tree / "gateway/broker/codec/topics.py", "import gateway.broker.engine.broker")
    assert broken_contracts(tree) == {"broker", "no-cycles"}


def test_the_bridge_importing_the_appliance_breaks_the_layers(tree: Path) -> None:
    add_line(tree / "bridge/runtime.py", "import outpost.config")
    # outpost imports the bridge, so the way back is also a cycle between the top packages; and
    # through outpost the bridge now reaches storage.
    assert broken_contracts(tree) == {"packages", "bridge-storage"}


def test_the_broker_importing_the_appliance_is_forbidden(tree: Path) -> None:
    add_line(tree / "gateway/broker/engine/sys_topics.py", "import outpost.app")
    # ... and through the appliance, the bridge now reaches storage and the engine reaches the
    # broker's net layer.
    assert broken_contracts(tree) == {"packages", "broker-alone", "bridge-storage", "broker"}


def test_the_appliance_importing_a_benchmark_breaks_the_layers(tree: Path) -> None:
    add_line(tree / "outpost/status.py", "import bench.procstat")
    assert broken_contracts(tree) == {"packages"}


def test_storage_importing_the_bridge_breaks_independence(tree: Path) -> None:
    add_line(tree / "storage/memory.py", "import bridge.uplink.outbox")
    # bridge and storage share a layer whose members are independent ("bridge | storage").
    assert broken_contracts(tree) == {"bridge-storage", "packages"}


def test_cloud_spark_importing_the_gateway_is_forbidden(tree: Path) -> None:
    add_line(tree / "cloud_spark/records.py", "import gateway.base.hostport")
    assert broken_contracts(tree) == {"cloud-alone"}


def test_a_new_cycle_is_caught(tree: Path) -> None:
    # storage.sqlite.cli imports storage.sqlite.admin; the way back closes a loop that no
    # layer contract covers (both modules are inside storage).
    assert "from storage.sqlite import admin" in (tree / "storage/sqlite/cli.py").read_text()
    add_line(tree / "storage/sqlite/admin.py", "import storage.sqlite.cli")
    assert broken_contracts(tree) == {"no-cycles"}


def test_a_device_package_reaching_back_to_the_bridge_config_is_caught(tree: Path) -> None:
    # bridge.config aggregates bridge.modbus.config and bridge.serial.config; a device package
    # importing the aggregate back is a loop between packages, with no exception for it.
    assert "from bridge.modbus.config import" in (tree / "bridge/config.py").read_text()
    add_line(tree / "bridge/modbus/poller.py", "import bridge.config")
    assert broken_contracts(tree) == {"no-cycles"}


def test_a_type_checking_cycle_is_caught(tree: Path) -> None:
    # An import under TYPE_CHECKING is an import: hiding one does not hide the cycle.
    add_line(tree / "gateway/broker/engine/handle_connect.py",
             "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
             "    from gateway.broker.engine.broker import Broker")
    assert broken_contracts(tree) == {"no-cycles"}


def test_a_module_outside_every_layer_is_caught(tree: Path) -> None:
    (tree / "gateway/broker/helpers.py").write_text('"""Belongs to no layer."""\n')
    assert broken_contracts(tree) == {"broker"}


def test_a_package_outside_the_gateway_layers_is_caught(tree: Path) -> None:
    (tree / "gateway/tools").mkdir()
    (tree / "gateway/tools/__init__.py").write_text('"""Belongs to no layer."""\n')
    assert broken_contracts(tree) == {"gateway"}


def test_the_console_naming_a_family_is_caught(tree: Path) -> None:
    # The console knows the families through bridge.families and bridge.catalog only; a page
    # reaching for a family's own package (here its configuration model) breaks that.
    add_line(tree / "outpost/console/pages_forms.py", "import bridge.s7.config")
    assert broken_contracts(tree) == {"console-families"}
