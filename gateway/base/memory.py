"""How much memory this process may use: its cgroup's limit (systemd's MemoryMax=) or the RAM.

Read once, at start. cgroup v2: `memory.max` of the process's own cgroup (`0::/path` in
/proc/self/cgroup); v1: `memory.limit_in_bytes` of the memory controller's cgroup. "max", a
missing file or v1's "no limit" (a value near 2**63) mean no limit, and MemTotal from
/proc/meminfo counts instead.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_V1_UNLIMITED = 1 << 60
# Queues may take this share of the limit: the rest is the interpreter, socket buffers, the
# store's page cache and the other sections. Without a limit, a share of the RAM.
QUEUE_SHARE_OF_LIMIT = 0.5
QUEUE_SHARE_OF_RAM = 0.25


def cgroup_memory_limit(proc_cgroup: Path = Path("/proc/self/cgroup"),
                        root: Path = CGROUP_ROOT) -> int | None:
    """The memory limit of this process's cgroup in bytes, or None when there is none."""
    try:
        lines = proc_cgroup.read_text(encoding="ascii").splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            candidate = root / path.lstrip("/") / "memory.max"
        elif "memory" in controllers.split(","):
            candidate = root / "memory" / path.lstrip("/") / "memory.limit_in_bytes"
        else:
            continue
        try:
            text = candidate.read_text(encoding="ascii").strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < _V1_UNLIMITED:
            return int(text)
    return None


def ram_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemTotal in bytes, or None when /proc/meminfo cannot be read."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def default_queue_budget() -> int:
    """Bytes all session queues together may hold in memory when the config does not say."""
    limit = cgroup_memory_limit()
    if limit is not None:
        return int(limit * QUEUE_SHARE_OF_LIMIT)
    ram = ram_bytes()
    return int((ram or 1 << 30) * QUEUE_SHARE_OF_RAM)
