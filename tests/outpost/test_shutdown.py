"""SIGTERM: stop accepting, DISCONNECT 0x8B to v5 clients, wills published, the store flushed,
exit 0; a shutdown that cannot finish gives up at its deadline with a log line."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import pytest

from gateway.broker.codec.packets import Publish, Will
from gateway.broker.codec.reason_codes import ReasonCode
from gateway.broker.contracts.config import ListenerConfig
from outpost import app
from outpost.config import Config, StatusConfig
from outpost.daemon import ShutdownTimeoutError
from storage.memory import MemoryStore
from tests.gateway.broker.e2e.v5_helpers import connected
from tests.outpost.support import NotifySocket, start_outpost
from tests.support.waiting import wait_for


def test_sigterm_disconnects_v5_clients_publishes_wills_and_flushes(tmp_path: Path) -> None:
    state = tmp_path / "state"
    notify = NotifySocket()
    try:
        outpost = start_outpost(tmp_path / "first", "", "--state-dir", str(state),
                                env={"NOTIFY_SOCKET": notify.path})
        keeper = connected(outpost, "ops-keeper", clean_start=False,
                           session_expiry_interval=3600)
        keeper.subscribe("wills/#", qos=1)
        leaver = connected(outpost, "ops-leaver",
                           will=Will("wills/ops-leaver", b"gone", 1))
        try:
            outpost.process.send_signal(signal.SIGTERM)
            keeper.expect_disconnect(ReasonCode.SERVER_SHUTTING_DOWN)
            leaver.expect_disconnect(ReasonCode.SERVER_SHUTTING_DOWN)
        finally:
            keeper.close()
            leaver.close()
        assert outpost.stop() == 0
        assert "STOPPING=1" in notify.lines()
        assert "stopped cleanly" in outpost.log()
    finally:
        notify.close()
    # The will reached the keeper's persistent session and was stored before the exit.
    again = start_outpost(tmp_path / "second", "", "--state-dir", str(state))
    try:
        keeper = connected(again, "ops-keeper", clean_start=False,
                           session_expiry_interval=3600)
        try:
            packet = keeper.expect(Publish)
            assert (packet.topic, packet.payload) == ("wills/ops-leaver", b"gone")
        finally:
            keeper.close()
    finally:
        assert again.stop() == 0


def test_new_connections_are_refused_while_stopping(tmp_path: Path) -> None:
    """After SIGTERM the listener is closed: a connect attempt fails or is closed at once."""
    import socket

    outpost = start_outpost(tmp_path)
    outpost.process.send_signal(signal.SIGTERM)
    assert outpost.process.wait(25) == 0

    def refused() -> bool:
        try:
            with socket.create_connection((outpost.host, outpost.port), timeout=1):
                return False
        except OSError:
            return True

    assert wait_for(refused, message="no listener closed")
    outpost.stop()


class HangingStore(MemoryStore):
    """A store whose final flush never completes (a wedged disk)."""

    async def close(self) -> None:
        await asyncio.Event().wait()


def test_shutdown_gives_up_at_its_deadline(monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(app, "build_hooks", lambda config, state_dir: HangingStore())
    config = Config(listeners=[ListenerConfig(bind="127.0.0.1:0")],
                    status=StatusConfig(enabled=False))

    async def main() -> None:
        stop = asyncio.Event()
        ready = asyncio.Event()
        task = asyncio.create_task(app.serve(config, stop=stop, stop_timeout=0.5,
                                             on_ready=lambda _addresses: ready.set()))
        await asyncio.wait_for(ready.wait(), 20)
        stop.set()
        await asyncio.wait_for(task, 20)

    with caplog.at_level(logging.INFO, logger="outpost"), \
            pytest.raises(ShutdownTimeoutError):
        asyncio.run(main())
    assert "shutdown did not finish within 0.5 s: giving up (exit status 1)" in caplog.text
    assert "stopped cleanly" not in caplog.text
