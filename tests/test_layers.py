"""The import layers of ../shared/DESIGN.md hold: imports point downward only.

Each module is given a rank; a module may import modules of its own rank or lower. The broker
coordinator (`gateway/broker.py`, `delivery.py`, `sys_topics.py`) sits just above the contracts
because it calls the hooks; it stays pure (no asyncio, socket, time or sqlite3).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROTOCOL, CORE, CONTRACTS, COORDINATOR, LINKS, STORAGE, IO, COMPOSITION = range(8)

RANKS: dict[str, int] = {
    "gateway.codec": PROTOCOL,
    "gateway.topics": PROTOCOL,
    "gateway.message": CORE,
    "gateway.router": CORE,
    "gateway.retained": CORE,
    "gateway.inflight": CORE,
    "gateway.session": CORE,
    "gateway.log_sampling": CORE,  # which occurrence of a repeated event is logged
    "gateway.config": CONTRACTS,
    "gateway.config_paths": CONTRACTS,  # config-relative file paths (pydantic validators)
    "gateway.hooks": CONTRACTS,
    "gateway.auth": CONTRACTS,
    "gateway.acl": CONTRACTS,  # ACL files parsed and evaluated: pure
    "gateway.passwords": CONTRACTS,  # password hashes and file text: pure (hashlib)
    "gateway.websocket": PROTOCOL,  # RFC 6455 handshake and framing, sans-I/O
    "gateway.listeners": IO,  # TLS contexts, WebSocket/unix servers, admission
    "gateway.security_files": IO,  # password/ACL files, certificates, `outpost passwd`
    "gateway.delivery": COORDINATOR,
    "gateway.sys_topics": COORDINATOR,
    "gateway.broker": COORDINATOR,
    "gateway.links": LINKS,
    "gateway.reload": COORDINATOR,  # the reload registry: pure, the loader does the reading
    "gateway.status": LINKS,  # status board and provider Protocol: no I/O, clocks passed in
    "gateway.daemon": IO,  # sd_notify, watchdog, journald, signals
    "gateway.status_http": IO,  # /, /status, /metrics
    "bridge.uplink.config": CONTRACTS,
    "bridge.uplink.envelope": PROTOCOL,
    "bridge.uplink.pacing": CORE,
    "bridge.uplink.outbox": CORE,
    "storage": STORAGE,
    "gateway.server": IO,
    "bridge": IO,
    "bridge.config": CONTRACTS,
    "bridge.serial.config": CONTRACTS,
    "bridge.report": CORE,
    "bridge.modbus.convert": CORE,
    "bridge.modbus.plan": CORE,
    "bridge.modbus.frames": PROTOCOL,
    "bridge.serial.parse": CORE,
    "bridge.serial.framing": PROTOCOL,
    "gateway.app": COMPOSITION,
    "gateway.cli": COMPOSITION,
    "gateway.__main__": COMPOSITION,
    "gateway.demo": COMPOSITION,  # `outpost demo`: child processes, simulated devices
}
PURE_BELOW = COORDINATOR  # ranks up to here never touch I/O or the clock
FORBIDDEN_IN_PURE = {"asyncio", "socket", "time", "sqlite3", "selectors", "threading"}


def rank_of(module: str) -> int | None:
    best = None
    for prefix, rank in RANKS.items():
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best[0])
        ):
            best = (prefix, rank)
    return None if best is None else best[1]


def modules() -> list[tuple[str, Path]]:
    found = []
    for package in ("gateway", "bridge", "storage", "cloud_spark"):
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found.append((name.removesuffix(".__init__"), path))
    return found


def imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize(("module", "path"), modules(), ids=str)
def test_imports_point_downward(module: str, path: Path) -> None:
    own = rank_of(module)
    for imported in imports(path):
        top = imported.split(".")[0]
        if module.startswith("cloud_spark"):
            assert top not in {"gateway", "bridge", "storage"}, f"{module} imports {imported}"
            continue
        if own is None:
            continue
        if own <= PURE_BELOW:
            assert top not in FORBIDDEN_IN_PURE, f"{module} (pure) imports {imported}"
        target = rank_of(imported)
        if target is not None:
            assert target <= own, f"{module} (rank {own}) imports {imported} (rank {target})"
