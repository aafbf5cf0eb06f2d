"""The drain gives every record it read back to the outbox: deleted when acknowledged, released
otherwise, so a cap that removes records in flight counts exactly the ones that were lost."""

from __future__ import annotations

import asyncio

import pytest

from bridge.uplink.client import RemoteLink
from bridge.uplink.config import UplinkConfig
from bridge.uplink.envelope import Outgoing
from bridge.uplink.outbox import MemoryOutbox
from gateway.base.outbox import OutboxRecord, RuleLimits

CAP = RuleLimits(4, 10**9, drop_oldest=True)


class FakeClient:
    """Stands in for `_Client`: the first `accept` publishes get futures, then it fails."""

    receive_maximum = 65535  # the remote's CONNACK limits nothing here

    def __init__(self, accept: int) -> None:
        self.accept = accept
        self.futures: list[asyncio.Future[int]] = []

    def overdue(self, timeout: float) -> bool:
        return False

    def publish_start(self, out: Outgoing) -> asyncio.Future[int]:
        if len(self.futures) >= self.accept:
            raise OSError("connection lost")
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.futures.append(future)
        return future


def link(outbox: MemoryOutbox) -> RemoteLink:
    config = UplinkConfig.model_validate({
        "remotes": [{"addresses": ["h:1"]}], "forward": [{"filter": "a/#"}],
    })
    return RemoteLink(config, config.remotes[0], outbox, "gw", None, asyncio.Event())


def fill(outbox: MemoryOutbox, n: int) -> None:
    for _ in range(n):
        outbox.append(OutboxRecord(outbox.next_seq(), "forward.0", "a/b", b"x", 1, False, 5), CAP)


def test_unsent_and_unacknowledged_records_are_released() -> None:
    async def scenario() -> None:
        outbox = MemoryOutbox()
        fill(outbox, 4)
        remote = link(outbox)
        client = FakeClient(accept=2)
        with pytest.raises(OSError):
            await remote._drain(client)  # type: ignore[arg-type]
        # 1 and 2 are in flight; 3 and 4 were read but never sent: released.
        fill(outbox, 4)  # the cap removes 1-4: only 3 and 4 are lost for sure
        assert outbox.stats().dropped == 2
        client.futures[0].set_result(0)  # 1 acknowledged: delivered
        client.futures[1].cancel()  # 2 abandoned with the session: lost
        await asyncio.sleep(0)
        assert outbox.stats().dropped == 3
        assert remote.inflight == set() and remote.status.acked == 1
        assert outbox.stats().messages == 4

    asyncio.run(scenario())


def test_refused_record_is_released_and_kept() -> None:
    async def scenario() -> None:
        outbox = MemoryOutbox()
        fill(outbox, 2)
        remote = link(outbox)
        client = FakeClient(accept=1)
        with pytest.raises(OSError):
            await remote._drain(client)  # type: ignore[arg-type]
        client.futures[0].set_result(0x87)  # refused by the remote
        await asyncio.sleep(0)
        assert remote.deferred.keys() == {1} and remote.status.refused == 1
        assert outbox.stats().messages == 2 and outbox.stats().dropped == 0
        fill(outbox, 4)  # neither is in flight now: removing them drops them at once
        assert outbox.stats().dropped == 2

    asyncio.run(scenario())
