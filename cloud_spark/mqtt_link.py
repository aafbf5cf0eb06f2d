"""One MQTT 5 connection of the lander: an asyncio protocol speaking :mod:`cloud_spark.mqtt_codec`.

How this works:

* :meth:`Link.connect` opens a TCP (or TLS) connection with the loop's own transport, sends
  CONNECT (``clean_start=False``, Session Expiry, Receive Maximum) and waits for CONNACK.
  Bytes received are appended to a buffer and cut into packets; every PUBLISH goes to the
  ``on_message`` callback right there, on the loop's thread, and the lander appends it to
  its open file. Nothing acknowledges a PUBLISH but :meth:`Link.ack_all`: acks are always
  deferred (QoS 1 only; the lander subscribes with QoS 1, so the broker downgrades QoS 2).
* **The read switch.** :meth:`pause_reading` stops dispatching (what is left in the buffer
  waits) and pauses the transport: nothing more is read from the socket, the kernel's
  receive buffer fills and TCP flow control stops the broker, whatever it does with Receive
  Maximum. :meth:`resume_reading` dispatches what was left, then reads again.
* Keepalive: a PINGREQ every half keepalive; no packet at all from the broker within one and
  a half keepalives of the ping (not counting time paused, when nothing is read) ends the
  connection.
* A fresh :class:`Link` per connection, so a packet id of an old connection is never acked
  on a new one. :attr:`lost` resolves when the connection ends for any reason (with the
  exception that ended it, if any). Requests that wait for an answer (CONNACK, SUBACK,
  UNSUBACK, the PUBACK of our own publish) are futures keyed by packet id; a refusal raises
  :class:`LinkError` with the MQTT reason code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable, Iterable
from typing import Any

from cloud_spark import mqtt_codec as mc

log = logging.getLogger("cloud_spark.mqtt_link")

CONNECT_TIMEOUT_S = 10.0


class LinkError(Exception):
    """The broker refused something or the connection failed; the text names the reason."""


class RefusedError(LinkError):
    """The broker answered a request with a failure reason code."""


def _refused(what: str, code: int) -> RefusedError:
    return RefusedError(f"{what} refused: reason code 0x{code:02x}")


# A CONNACK code below 0x80 other than 0 is no MQTT 5 reason code: a broker that speaks only
# MQTT 3.1.1 answered with its return code (moquette 0.17 sends 0x01 in a CONNACK shaped like
# MQTT 5's, where the MQTT 5 answer is 0x84, Unsupported Protocol Version).
_V311_CONNACK = {
    0x01: "the broker does not accept MQTT 5, which the lander needs (MQTT 3.1.1 return "
          "code 1, unacceptable protocol version)",
    0x02: "client identifier rejected (MQTT 3.1.1 return code 2)",
    0x03: "server unavailable (MQTT 3.1.1 return code 3)",
    0x04: "bad user name or password (MQTT 3.1.1 return code 4)",
    0x05: "not authorized (MQTT 3.1.1 return code 5)",
}


def _connect_refused(code: int) -> RefusedError:
    if code in _V311_CONNACK:
        return RefusedError(f"CONNECT refused: {_V311_CONNACK[code]}")
    return _refused("CONNECT", code)


class _Protocol(asyncio.Protocol):
    def __init__(self, link: Link) -> None:
        self.link = link

    def data_received(self, data: bytes) -> None:
        self.link._data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.link._end(LinkError(f"connection lost: {exc}") if exc else None)


class Link:
    """One MQTT 5 connection with a persistent session; see the module docstring."""

    def __init__(
        self,
        client_id: str,
        on_message: Callable[[mc.Publish], None],
        *,
        username: str | None = None,
        password: str | None = None,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.client_id = client_id
        self.lost: asyncio.Future[None] = self.loop.create_future()
        self.paused = False
        #: the broker still had our session when it answered CONNECT
        self.session_present = False
        self._on_message = on_message
        self._username = username
        self._password = password
        self._tls = tls_context
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self._connack: asyncio.Future[mc.Ack] = self.loop.create_future()
        self._waiting: dict[int, asyncio.Future[mc.Ack]] = {}
        self._next_mid = 0
        self._keepalive = 0
        self._last_heard = time.monotonic()
        self._ping_sent: float | None = None
        self._ping_timer: asyncio.TimerHandle | None = None

    # -- requests -------------------------------------------------------------------------

    async def connect(
        self, host: str, port: int, *, keepalive: int, session_expiry_s: int, receive_maximum: int
    ) -> int:
        """Connect without clean start; returns the broker's Receive Maximum."""
        try:
            transport, _ = await asyncio.wait_for(
                self.loop.create_connection(
                    lambda: _Protocol(self), host, port,
                    ssl=self._tls, server_hostname=host if self._tls else None,
                ),
                CONNECT_TIMEOUT_S,
            )  # fmt: skip
        except (OSError, TimeoutError) as exc:
            raise LinkError(f"cannot connect to {host}:{port}: {exc or 'timed out'}") from exc
        self._transport = transport
        self._keepalive = keepalive
        transport.write(
            mc.connect(
                self.client_id, keepalive=keepalive, session_expiry=session_expiry_s,
                receive_maximum=receive_maximum, username=self._username,
                password=self._password,
            )
        )  # fmt: skip
        connack = await self._until_lost(self._connack)
        if connack.codes[0] != 0:
            raise _connect_refused(connack.codes[0])
        self.session_present = bool(connack.flags & 0x01)
        if keepalive > 0:
            self._ping_timer = self.loop.call_later(keepalive / 2, self._ping)
        broker_maximum = connack.properties.get(mc.PROP_RECEIVE_MAXIMUM, 65535)
        return int(broker_maximum)

    async def subscribe(self, filters: Iterable[str], qos: int = 1) -> None:
        """Subscribe each filter; raises :class:`LinkError` if the broker refuses one."""
        for topic_filter in filters:
            mid = self._mid()
            answer = await self._request(mid, mc.subscribe(mid, topic_filter, qos))
            if any(code >= 0x80 for code in answer.codes):
                raise _refused(f"SUBSCRIBE {topic_filter}", answer.codes[0])

    async def unsubscribe(self, filters: Iterable[str]) -> list[int]:
        """Unsubscribe each filter; returns the reason codes (0x11: there was none)."""
        codes = []
        for topic_filter in filters:
            mid = self._mid()
            answer = await self._request(mid, mc.unsubscribe(mid, topic_filter))
            if any(code >= 0x80 for code in answer.codes):
                raise _refused(f"UNSUBSCRIBE {topic_filter}", answer.codes[0])
            codes += answer.codes
        return codes

    async def publish(self, topic: str, payload: bytes) -> None:
        """Publish at QoS 1 and wait for the broker's PUBACK (a refusal raises)."""
        mid = self._mid()
        answer = await self._request(mid, mc.publish(mid, topic, payload))
        if answer.codes[0] >= 0x80:
            raise _refused(f"PUBLISH {topic}", answer.codes[0])

    def ack_all(self, mids: list[int]) -> None:
        """PUBACK received QoS 1 messages, in the order given, in one write."""
        if self._transport is not None and mids:
            self._transport.write(b"".join(mc.puback(mid) for mid in mids))

    async def disconnect(self, session_expiry_s: int | None = None) -> None:
        """Send DISCONNECT (optionally changing the Session Expiry Interval: 0 ends the
        session) after everything written before it, and wait until the socket is closed."""
        if self._transport is None:
            return
        self._transport.write(mc.disconnect(session_expiry_s))
        self._transport.close()  # flushes what is buffered first
        with contextlib.suppress(LinkError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.lost), CONNECT_TIMEOUT_S)

    def close(self) -> None:
        """Drop the connection at once (nothing more is sent)."""
        if self._transport is not None:
            self._transport.abort()
        self._end(None)

    # -- the read switch ------------------------------------------------------------------

    def pause_reading(self) -> None:
        if not self.paused:
            self.paused = True
            if self._transport is not None:
                self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.paused:
            self.paused = False
            self._last_heard = time.monotonic()  # the broker could not be heard meanwhile
            self._dispatch()
            if not self.paused and self._transport is not None and not self.lost.done():
                self._transport.resume_reading()

    # -- incoming -------------------------------------------------------------------------

    def _data(self, data: bytes) -> None:
        self._last_heard = time.monotonic()
        self._buffer += data
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand every complete packet in the buffer on, until paused."""
        buffer, pos = self._buffer, 0
        try:
            while not self.paused:
                found = mc.split_packet(buffer, pos)
                if found is None:
                    break
                first, start, pos = found
                body = memoryview(bytes(buffer[start:pos]))
                if first & 0xF0 == mc.PUBLISH:
                    message = mc.decode_publish(first, body)
                    if message.qos == 2:
                        raise mc.ProtocolError("QoS 2 PUBLISH on a QoS 1 subscription")
                    self._on_message(message)
                else:
                    self._answer(mc.decode_ack(first, body))
        except mc.ProtocolError as exc:  # the broker's fault: reconnect
            self._end(LinkError(f"protocol error from the broker: {exc}"))
            if self._transport is not None:
                self._transport.abort()
            return
        except Exception as exc:  # a failing on_message ends the connection and the lander
            log.exception("dropping the connection")
            self._end(exc)
            if self._transport is not None:
                self._transport.abort()
            return
        finally:
            del buffer[:pos]

    def _answer(self, ack: mc.Ack) -> None:
        if ack.kind == mc.PINGRESP:
            self._ping_sent = None
        elif ack.kind == mc.CONNACK:
            if not self._connack.done():
                self._connack.set_result(ack)
        elif ack.kind == mc.DISCONNECT:
            self._end(LinkError(f"the broker disconnected: reason code 0x{ack.codes[0]:02x}"))
        else:
            future = self._waiting.pop(ack.mid, None)
            if future is not None and not future.done():
                future.set_result(ack)

    def _ping(self) -> None:
        if self.lost.done() or self._transport is None:
            return
        now = time.monotonic()
        silent = now - max(self._ping_sent or now, self._last_heard)
        if self._ping_sent is not None and not self.paused and silent > 1.5 * self._keepalive:
            self._end(LinkError("no answer to PINGREQ"))
            self._transport.abort()
            return
        if self._ping_sent is None:
            self._ping_sent = now
            self._transport.write(mc.PINGREQ_PACKET)
        self._ping_timer = self.loop.call_later(self._keepalive / 2, self._ping)

    # -- plumbing -------------------------------------------------------------------------

    def _mid(self) -> int:
        self._next_mid = self._next_mid % 65535 + 1
        return self._next_mid

    def _end(self, exc: BaseException | None) -> None:
        if self._ping_timer is not None:
            self._ping_timer.cancel()
        if self.lost.done():
            return
        if exc is None:
            self.lost.set_result(None)
        else:
            self.lost.set_exception(exc)
        waiting: list[asyncio.Future[Any]] = [self._connack, *self._waiting.values()]
        for future in waiting:
            if not future.done():
                future.set_exception(LinkError(f"connection lost: {exc or 'closed'}"))

    async def _request(self, mid: int, packet: bytes) -> mc.Ack:
        if self._transport is None or self.lost.done():
            raise LinkError("not connected")
        future: asyncio.Future[mc.Ack] = self.loop.create_future()
        self._waiting[mid] = future
        self._transport.write(packet)
        answer: mc.Ack = await self._until_lost(future)
        return answer

    async def _until_lost(self, future: asyncio.Future[Any]) -> Any:
        """``future``'s result, or the exception that ended the connection first."""
        await asyncio.wait({future, self.lost}, return_when=asyncio.FIRST_COMPLETED)
        if future.done():
            return future.result()
        self.lost.result()  # raises what ended the connection
        raise LinkError("connection closed")
