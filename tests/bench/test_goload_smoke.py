"""Smoke test of the Go load generator (bench/goload, `bench.compare --generator go`).

Every scenario runs very briefly against a fresh `outpost run`, once with the Go program and
once with `bench.loadgen`, and the two results must have the same keys (what lets
`bench.compare` take either generator). Counts are asserted where they are exact; nothing
about time is (a loaded machine may deliver nothing inside a one-second window, so the
throughput checks look at the totals, which include the drain after the window). Skipped when
Go is missing or older than bench/goload/go.mod needs, like the Paho Go client tests.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import compare, gogen, loadgen
from tests.bench.test_loadgen_smoke import OPTS  # the same short scenarios


@pytest.fixture(scope="module")
def goload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go program, built once per module (per test worker) into a temporary folder."""
    try:
        gogen.check_go()
    except gogen.GoUnavailableError as exc:
        pytest.skip(str(exc))
    return gogen.build(tmp_path_factory.mktemp("goload") / "goload")


@pytest.fixture
def outpost(tmp_path: Path) -> Iterator[compare.Broker]:
    setup = compare.BrokerSetup(workdir=tmp_path, broker_cpu=None, python=sys.executable)
    broker = setup.start("outpost")
    try:
        yield broker
    finally:
        broker.stop()


def _both(goload: Path, name: str, broker: compare.Broker) -> dict[str, Any]:
    """The Go result, after checking its keys against bench.loadgen's on the same broker."""
    go = gogen.run(goload, name, compare.HOST, broker.port, OPTS, broker.pid)
    python = loadgen.SCENARIOS[name](compare.HOST, broker.port, OPTS, broker.pid)
    assert go["scenario"] == name
    assert sorted(go) == sorted(python)
    if "loadgen_cpu_pct" in go:
        assert sorted(go["loadgen_cpu_by_role_pct"]) == ["goload"]
        assert {str(k) for k in go["cpu_busy_pct"]} == {str(k) for k in python["cpu_busy_pct"]}
    return go


@pytest.mark.parametrize(("name", "subscribers"), [("fan-in", 1), ("fan-out", 16), ("qos1", 1)])
def test_throughput(goload: Path, outpost: compare.Broker, name: str, subscribers: int) -> None:
    r = _both(goload, name, outpost)
    sent, delivered = r["total_sent"], r["total_delivered"]
    assert isinstance(sent, int)
    assert isinstance(delivered, int)
    assert 0 < delivered <= sent * subscribers
    assert r["lost"] == sent * subscribers - delivered
    assert r["errors"] == 0
    assert r["subscribers"] == subscribers
    assert isinstance(r["delivered_per_s"], int)
    assert r["delivered_in_window"] <= delivered
    assert r["loadgen_processes"] == 1


def test_latency(goload: Path, outpost: compare.Broker) -> None:
    r = _both(goload, "latency", outpost)
    assert r["samples"] > 0
    assert r["p50_ms"] <= r["p99_ms"] <= r["max_ms"]
    assert 0 < r["total_delivered"] <= r["total_sent"]
    assert r["errors"] == 0


def test_idle(goload: Path, outpost: compare.Broker) -> None:
    r = _both(goload, "idle", outpost)
    assert r["connacked"] == OPTS.idle_connections
    assert r["failed"] == 0
    assert isinstance(r["rss_after_kib"], int)


def test_retained(goload: Path, outpost: compare.Broker) -> None:
    r = _both(goload, "retained", outpost)
    assert r["delivered"] == OPTS.retained
    assert r["publishes_received"] == OPTS.retained
    assert r["errors"] == 0


def test_old_go_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A `go` older than go.mod asks for is refused with both versions in the message."""
    monkeypatch.setattr(gogen, "go_command", lambda: "/usr/bin/go")
    monkeypatch.setattr(gogen, "go_version", lambda go: (1, 19))
    major, minor = gogen.go_needed()
    with pytest.raises(gogen.GoUnavailableError, match=rf"go1\.19.*needs go{major}\.{minor}"):
        gogen.check_go()
