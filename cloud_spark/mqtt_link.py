"""One MQTT 5 connection of the lander: paho-mqtt driven by the asyncio loop, acks by hand.

How this works:

* paho-mqtt 2.x's public API only: ``Client(manual_ack=True)`` keeps paho from answering a
  QoS 1 PUBLISH with PUBACK, and :meth:`Link.ack` (paho's ``ack(mid, qos)``) sends it later.
  The socket is driven by the running asyncio loop through paho's external-loop hooks
  (``on_socket_open``/``_close``/``_register_write``/``_unregister_write`` add and remove
  the loop's reader and writer; ``loop_read``/``loop_write``/``loop_misc``), so there is no
  network thread and no queue between paho and the lander: paho calls ``on_message`` from
  inside :meth:`_readable`, on the loop's thread, and the lander appends to its open file
  right there.
* :meth:`_readable` reads packets until a read yields no message (paho's ``loop_read``
  reads one packet per call), so one wake-up of the loop handles a whole burst. (TLS keeps
  decrypted bytes of its own: when some are left, another read is scheduled at once.)
* **The read switch.** :meth:`pause_reading` takes the socket out of the loop and
  :meth:`resume_reading` puts it back: while paused nothing is read, so the kernel's
  receive buffer fills and TCP flow control stops the broker. This bounds what the lander
  holds whatever the broker does with Receive Maximum.
* A fresh :class:`Link` (a fresh paho client) per connection: a packet id of an old
  connection can never be acknowledged on a new one. :attr:`lost` resolves when the
  connection ends for any reason (with the exception that ended it, if any).
* Requests that wait for an answer (CONNACK, SUBACK, UNSUBACK, PUBACK of our own publish)
  are futures keyed by packet id; a refusal raises :class:`LinkError` with the MQTT reason
  code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.reasoncodes import ReasonCode

log = logging.getLogger("cloud_spark.mqtt_link")

#: most packets read in one wake-up before other work of the loop gets a turn
READ_BURST = 256
#: how often paho's keepalive bookkeeping (PINGREQ, PINGRESP timeout) runs
MISC_INTERVAL_S = 1.0


class LinkError(Exception):
    """The broker refused something or the connection failed; the text names the reason."""


def _code(reason: Any) -> int:
    return int(reason.value) if isinstance(reason, ReasonCode) else int(reason or 0)


def _describe(reason: Any) -> str:
    return f"reason code 0x{_code(reason):02x} ({reason})"


class Link:
    """One MQTT 5 connection with a persistent session; see the module docstring."""

    def __init__(
        self,
        client_id: str,
        on_message: Callable[[mqtt.MQTTMessage], None],
        *,
        username: str | None = None,
        password: str | None = None,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=client_id,
            protocol=mqtt.MQTTv5,
            manual_ack=True,
        )
        if username is not None:
            self.client.username_pw_set(username, password)
        if tls_context is not None:
            self.client.tls_set_context(tls_context)
        self.lost: asyncio.Future[None] = self.loop.create_future()
        self.paused = False
        self._on_message = on_message
        self._messages = 0  # counts on_message calls: tells _readable a read found one
        self._sock: Any = None
        self._connack: asyncio.Future[int] = self.loop.create_future()
        self._waiting: dict[int, asyncio.Future[list[Any]]] = {}
        self._misc: asyncio.TimerHandle | None = None
        client = self.client
        client.on_connect = self._connected
        client.on_disconnect = self._disconnected
        client.on_message = self._message
        client.on_subscribe = self._answered
        client.on_unsubscribe = self._answered
        client.on_publish = self._published
        client.on_socket_open = self._socket_open
        client.on_socket_close = self._socket_close
        client.on_socket_register_write = self._want_write
        client.on_socket_unregister_write = self._done_writing

    # -- requests -------------------------------------------------------------------------

    async def connect(
        self, host: str, port: int, *, keepalive: int, session_expiry_s: int, receive_maximum: int
    ) -> int:
        """Connect with ``clean_start=False``; returns the broker's Receive Maximum."""
        props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]
        props.SessionExpiryInterval = session_expiry_s
        props.ReceiveMaximum = receive_maximum
        try:
            # blocking TCP (and TLS) connect, bounded by paho's connect timeout (5 s); the
            # lander has nothing else to do meanwhile
            self.client.connect(host, port, keepalive, clean_start=False, properties=props)
        except (OSError, ssl.SSLError) as exc:
            raise LinkError(f"cannot connect to {host}:{port}: {exc}") from exc
        self._misc = self.loop.call_later(MISC_INTERVAL_S, self._tick)
        broker_maximum: int = await self._until_lost(self._connack)
        return broker_maximum

    async def subscribe(self, filters: Iterable[str], qos: int = 1) -> None:
        """Subscribe each filter; raises :class:`LinkError` if the broker refuses one."""
        for topic_filter in filters:
            _, mid = self.client.subscribe(topic_filter, qos)
            codes = await self._answer(mid)
            if any(_code(code) >= 0x80 for code in codes):
                raise LinkError(f"SUBSCRIBE {topic_filter} refused: {_describe(codes[0])}")

    async def unsubscribe(self, filters: Iterable[str]) -> list[int]:
        """Unsubscribe each filter; returns the reason codes (0x11: there was none)."""
        result = []
        for topic_filter in filters:
            _, mid = self.client.unsubscribe(topic_filter)
            codes = await self._answer(mid)
            if any(_code(code) >= 0x80 for code in codes):
                raise LinkError(f"UNSUBSCRIBE {topic_filter} refused: {_describe(codes[0])}")
            result += [_code(code) for code in codes]
        return result

    async def publish(self, topic: str, payload: bytes) -> None:
        """Publish at QoS 1 and wait for the broker's PUBACK (a refusal raises)."""
        info = self.client.publish(topic, payload, qos=1)
        [code] = await self._answer(info.mid)
        if _code(code) >= 0x80:
            raise LinkError(f"PUBLISH {topic} refused: {_describe(code)}")

    def ack(self, mid: int, qos: int) -> None:
        """PUBACK (QoS 1) a received message; queued and written when the socket allows."""
        self.client.ack(mid, qos)

    async def disconnect(self, session_expiry_s: int | None = None) -> None:
        """Send DISCONNECT (optionally changing the Session Expiry Interval: 0 ends the
        session) after everything queued before it, and wait until the socket is closed."""
        props = None
        if session_expiry_s is not None:
            props = Properties(PacketTypes.DISCONNECT)  # type: ignore[no-untyped-call]
            props.SessionExpiryInterval = session_expiry_s
        self.client.disconnect(properties=props)
        with contextlib.suppress(LinkError):
            await asyncio.wait_for(asyncio.shield(self.lost), 10)

    def close(self) -> None:
        """Drop the connection at once (nothing more is sent)."""
        if self._misc is not None:
            self._misc.cancel()
        if self._sock is not None:
            self._socket_close(self.client, None, self._sock)
            with contextlib.suppress(OSError):
                self._sock.close()
        self._end(None)

    # -- the read switch ------------------------------------------------------------------

    def pause_reading(self) -> None:
        if not self.paused:
            self.paused = True
            if self._sock is not None:
                self.loop.remove_reader(self._sock)

    def resume_reading(self) -> None:
        if self.paused:
            self.paused = False
            if self._sock is not None:
                self.loop.add_reader(self._sock, self._readable)
                self.loop.call_soon(self._readable)  # TLS may hold decrypted bytes already

    # -- paho's external-loop hooks -------------------------------------------------------

    def _readable(self) -> None:
        if self._sock is None or self.paused:
            return
        try:
            for _ in range(READ_BURST):
                before = self._messages
                rc = self.client.loop_read()
                if rc != mqtt.MQTT_ERR_SUCCESS or self._messages == before or self.paused:
                    break
        except Exception as exc:  # a failing on_message ends the connection
            log.exception("reading failed")
            self._end(exc)
            self.close()
            return
        pending = getattr(self._sock, "pending", None)
        if pending is not None and not self.paused and pending() > 0:
            self.loop.call_soon(self._readable)

    def _writable(self) -> None:
        self.client.loop_write()

    def _tick(self) -> None:
        self.client.loop_misc()
        if not self.lost.done():
            self._misc = self.loop.call_later(MISC_INTERVAL_S, self._tick)

    def _socket_open(self, client: Any, userdata: Any, sock: Any) -> None:
        self._sock = sock
        if hasattr(sock, "setsockopt"):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if not self.paused:
            self.loop.add_reader(sock, self._readable)

    def _socket_close(self, client: Any, userdata: Any, sock: Any) -> None:
        if self._sock is not None:
            self.loop.remove_reader(sock)
            self.loop.remove_writer(sock)
            self._sock = None

    def _want_write(self, client: Any, userdata: Any, sock: Any) -> None:
        self.loop.add_writer(sock, self._writable)

    def _done_writing(self, client: Any, userdata: Any, sock: Any) -> None:
        self.loop.remove_writer(sock)

    # -- paho's callbacks -----------------------------------------------------------------

    def _connected(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if self._connack.done():
            return
        if _code(reason) >= 0x80:
            self._connack.set_exception(LinkError(f"CONNECT refused: {_describe(reason)}"))
            return
        self._connack.set_result(getattr(props, "ReceiveMaximum", None) or 65535)

    def _disconnected(
        self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any
    ) -> None:
        if _code(reason) == 0:
            self._end(None)
        else:
            self._end(LinkError(f"connection lost: {_describe(reason)}"))

    def _message(self, client: Any, userdata: Any, message: mqtt.MQTTMessage) -> None:
        self._messages += 1
        self._on_message(message)

    def _answered(self, client: Any, userdata: Any, mid: int, codes: Any, props: Any) -> None:
        future = self._waiting.pop(mid, None)
        if future is not None and not future.done():
            future.set_result(list(codes))

    def _published(self, client: Any, userdata: Any, mid: int, code: Any, props: Any) -> None:
        self._answered(client, userdata, mid, [code], props)

    # -- plumbing -------------------------------------------------------------------------

    def _end(self, exc: BaseException | None) -> None:
        if self._misc is not None:
            self._misc.cancel()
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

    async def _answer(self, mid: int | None) -> list[Any]:
        if mid is None:
            raise LinkError("not connected")
        future: asyncio.Future[list[Any]] = self.loop.create_future()
        self._waiting[mid] = future
        codes: list[Any] = await self._until_lost(future)
        return codes

    async def _until_lost(self, future: asyncio.Future[Any]) -> Any:
        """``future``'s result, or the exception that ended the connection first."""
        await asyncio.wait({future, self.lost}, return_when=asyncio.FIRST_COMPLETED)
        if future.done():
            return future.result()
        self.lost.result()  # raises what ended the connection
        raise LinkError("connection closed")
