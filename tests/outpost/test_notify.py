"""sd_notify: READY=1 only once the store is open and every listener is bound, WATCHDOG=1 from
the event loop, STATUS= lines, RELOADING=1 / READY=1 around a reload, STOPPING=1 at shutdown —
received on a datagram socket the test binds as `NOTIFY_SOCKET`, through systemd-python and
through the built-in sender (systemd-python hidden)."""

from __future__ import annotations

import asyncio
import itertools
import os
import socket
import statistics
from pathlib import Path

import pytest

from gateway.broker.contracts.config import ListenerConfig
from outpost import daemon
from outpost.app import serve
from outpost.config import Config, StatusConfig
from storage.config import StorageConfig
from tests.gateway.broker.e2e.helpers import RawClient
from tests.outpost.support import NotifySocket, start_outpost
from tests.support.mosquitto import free_port
from tests.support.waiting import wait_for

BACKENDS = ["systemd-python", "builtin"]
WATCHDOG_USEC = 300_000  # pings every 0.15 s
PINGS = 12  # the cadence is judged on the gaps between this many pings, at least


def check_watchdog_cadence(notify: NotifySocket, usec_s: float) -> None:
    """The pings come at about half of WATCHDOG_USEC (sd_watchdog_enabled(3)).

    A protocol property, not a benchmark: the median gap between consecutive `WATCHDOG=1`
    datagrams (arrival times at the socket) must lie between 0.25 and 0.75 of WATCHDOG_USEC.
    The median ignores the odd late ping of a busy machine (the loop starting up, the reload);
    the band still tells apart a daemon pinging at the full interval (too late for systemd) or
    far too often.
    """
    times = [at for at, text in list(notify.messages) if "WATCHDOG=1" in text.split("\n")]
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    assert len(gaps) >= PINGS - 1, gaps
    median = statistics.median(gaps)
    assert 0.25 * usec_s <= median <= 0.75 * usec_s, (
        f"median gap {median:.3f} s between watchdog pings, WATCHDOG_USEC {usec_s:.3f} s "
        f"(want about half); gaps {[round(g, 3) for g in gaps]}"
    )


def test_ready_only_after_the_store_is_open_and_every_listener_is_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the instant READY=1 is sent (checked synchronously, on the loop: nothing can be
    bound meanwhile), both MQTT listeners and the status endpoint accept connections and the
    database file exists."""
    ports = [free_port(), free_port()]
    status_port = free_port()
    config = Config(
        listeners=[ListenerConfig(bind=f"127.0.0.1:{port}") for port in ports],
        status=StatusConfig(bind=f"127.0.0.1:{status_port}"),
        storage=StorageConfig(durability="normal"),
    )
    sent: list[str] = []
    at_ready: dict[str, object] = {}

    def send(text: str) -> None:
        if "READY=1" in text.split("\n") and not at_ready:
            for port in [*ports, status_port]:
                with socket.create_connection(("127.0.0.1", port), timeout=2):
                    at_ready[f"port {port}"] = True
            at_ready["database"] = (tmp_path / "outpost.db").exists()
        sent.append(text)

    monkeypatch.setattr(daemon.Notifier, "from_env", classmethod(
        lambda cls, environ=None: cls("/nonexistent/notify", send, "test")))

    async def main() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(serve(config, tmp_path, stop=stop))
        while not any("READY=1" in text for text in sent):
            assert not task.done(), task.exception()
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, 20)

    asyncio.run(main())
    assert at_ready == {**{f"port {p}": True for p in [*ports, status_port]}, "database": True}
    ready = next(i for i, text in enumerate(sent) if "READY=1" in text)
    assert "STATUS=0 clients" in sent[ready]
    stopping = next(i for i, text in enumerate(sent) if "STOPPING=1" in text)
    assert stopping > ready


@pytest.mark.parametrize("backend", BACKENDS)
def test_notify_protocol_of_a_running_gateway(tmp_path: Path, backend: str) -> None:
    if backend == "systemd-python":
        pytest.importorskip("systemd.daemon", reason="systemd-python is not installed")
    notify = NotifySocket()
    try:
        outpost = start_outpost(
            tmp_path, '[status]\nbind = "127.0.0.1:0"\nhistory_interval = 0.2\n',
            env={"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": str(WATCHDOG_USEC)},
            hide_systemd=backend == "builtin",
        )
        wait_for(lambda: notify.count("READY=1") == 1, message="no READY=1")
        first = notify.texts()[0].split("\n")
        assert first[0] == "READY=1" and first[1].startswith("STATUS=0 clients")
        # Pinged from the loop at half of WATCHDOG_USEC: several pings while we wait.
        wait_for(lambda: notify.count("WATCHDOG=1") >= 3, message="no watchdog pings")
        with RawClient(outpost.host, outpost.port) as client:
            assert client.connect("ops-notify")[3] == 0
            wait_for(lambda: any(line.startswith("STATUS=1 client,")
                                   for line in notify.lines()), message="no STATUS with 1 client")
            outpost.hup()
            wait_for(lambda: notify.count("READY=1") == 2, message="no READY=1 after reload")
        lines = notify.lines()
        assert lines.index("RELOADING=1") < len(lines) - 1 - lines[::-1].index("READY=1")
        wait_for(lambda: notify.count("WATCHDOG=1") >= PINGS, timeout=30,
                   message=f"no {PINGS} watchdog pings")
        check_watchdog_cadence(notify, WATCHDOG_USEC / 1e6)
        assert outpost.stop() == 0
        lines = notify.lines()
        assert "STOPPING=1" in lines
        assert lines.index("STOPPING=1") > lines.index("RELOADING=1")
        log = outpost.log()
        missing = log.count("systemd-python is not installed")
        assert missing == (1 if backend == "builtin" else 0), log
        assert f"ready: told systemd ({backend})" in log
    finally:
        notify.close()


def test_no_watchdog_pings_without_watchdog_usec(tmp_path: Path) -> None:
    notify = NotifySocket()
    try:
        outpost = start_outpost(tmp_path, env={"NOTIFY_SOCKET": notify.path})
        wait_for(lambda: notify.count("READY=1") == 1, message="no READY=1")
        assert outpost.stop() == 0
        assert notify.count("WATCHDOG=1") == 0
        assert "STOPPING=1" in notify.lines()
    finally:
        notify.close()


def test_watchdog_interval_is_half_of_watchdog_usec() -> None:
    assert daemon.watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert daemon.watchdog_interval({"WATCHDOG_USEC": "30000000",
                                     "WATCHDOG_PID": str(os.getpid())}) == 15.0
    # Meant for another process, or off.
    assert daemon.watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert daemon.watchdog_interval({"WATCHDOG_USEC": "0"}) is None
    assert daemon.watchdog_interval({}) is None


def test_builtin_sender_reaches_an_abstract_socket() -> None:
    name = f"outpost-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        notifier = daemon.Notifier(f"@{name}")
        notifier.notify("READY=1", "STATUS=hello")
        assert sock.recv(1024) == b"READY=1\nSTATUS=hello"
        notifier.status("hello")  # unchanged since the last STATUS=: not sent again
        notifier.status("bye")
        assert sock.recv(1024) == b"STATUS=bye"


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = daemon.Notifier.from_env({})
    assert not notifier.enabled
    notifier.notify("READY=1")  # no socket, no error
