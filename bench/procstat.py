"""Readings from /proc: CPU time of processes, busy time of CPUs, resident memory.

Used to show where the time went during a measured window: the broker should be near 100 % of
its core and the load generator well below 100 % of the other one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (0.0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return 0.0
    fields = text.rpartition(")")[2].split()
    # fields[0] is the state (field 3 of stat(5)); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def total_cpu_seconds(pids: Iterable[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def rss_kib(pid: int) -> int:
    """VmRSS of a process in KiB."""
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


@dataclass(frozen=True)
class CpuTimes:
    """Busy and total jiffies per CPU number, from /proc/stat."""

    busy: dict[int, int]
    total: dict[int, int]

    @staticmethod
    def read() -> CpuTimes:
        busy: dict[int, int] = {}
        total: dict[int, int] = {}
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                name, _, rest = line.partition(" ")
                if not name.startswith("cpu") or name == "cpu":
                    continue
                values = [int(v) for v in rest.split()]
                idle = values[3] + (values[4] if len(values) > 4 else 0)
                # guest time is already counted in user time
                all_time = sum(values[:8])
                cpu = int(name[3:])
                busy[cpu] = all_time - idle
                total[cpu] = all_time
        return CpuTimes(busy, total)

    def busy_percent_since(self, earlier: CpuTimes) -> dict[int, float]:
        out: dict[int, float] = {}
        for cpu, total in self.total.items():
            span = total - earlier.total.get(cpu, 0)
            if span > 0:
                out[cpu] = round(100.0 * (self.busy[cpu] - earlier.busy.get(cpu, 0)) / span, 1)
        return out
