"""Worker processes of the load generator: raw sockets, pre-encoded packets, shared counters.

Theory of operation
-------------------
Each public function taking `(ctl, job)` here (`qos0_publisher`, `subscriber`, `idle_worker`,
...) is the body of one forked process pinned to the load CPU. No MQTT library is used: every
PUBLISH is encoded once by `bench.wire` and publishers send large concatenated batches of
identical packets. Subscribers never decode what they receive: all messages of a scenario have
the same size, so a QoS 0 subscriber counts `bytes // size` and peeks at one first byte per read
to prove it is still aligned, and it asks the kernel (SO_RCVLOWAT) to wake it only once a good
amount of data is waiting. A QoS 1 subscriber answers a whole read with one `send` of PUBACKs
built from extended slices (`data[pid_offset::size]`).

Workers and the parent share one array of 64-bit counters (`Control`): go / stop flags, and per
worker slot a ready state and sent / delivered / error counters that the parent samples at the
start and the end of the measured window. Throughput publishers are closed-loop over that array:
they pause while more than `window` messages per subscriber are sent but not yet delivered, so
no broker is pushed into dropping messages and the delivered rate is what it can sustain.

Every loop is bounded by a deadline and an iteration cap; every socket wait has a timeout.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import errno
import os
import resource
import select
import selectors
import socket
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.sharedctypes import RawArray

from bench import wire

PAYLOAD_SIZE = 64
DEFAULT_LOAD_CPUS: tuple[int, ...] = (1,)
SETUP_TIMEOUT = 20.0
RECV_BUFFER = 1 << 20

# control block: flags first, then FIELDS counters per worker slot
GO, STOP_PUB, STOP = 0, 1, 2
_HEAD = 4
READY, SENT, DELIVERED, ERRORS, VALUE, EXTRA = range(6)
_FIELDS = 6


class LoadError(RuntimeError):
    """A scenario could not run (broker refused, worker died, timeout)."""


class Control:
    """Counters and flags in shared memory, inherited by forked workers."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.arr = RawArray(ctypes.c_int64, _HEAD + slots * _FIELDS)

    def flag(self, which: int) -> bool:
        return bool(self.arr[which])

    def raise_flag(self, which: int) -> None:
        self.arr[which] = 1

    def get(self, slot: int, what: int) -> int:
        return int(self.arr[_HEAD + slot * _FIELDS + what])

    def set(self, slot: int, what: int, value: int) -> None:
        self.arr[_HEAD + slot * _FIELDS + what] = value

    def add(self, slot: int, what: int, value: int) -> None:
        self.arr[_HEAD + slot * _FIELDS + what] += value

    def total(self, what: int, slots: Iterable[int]) -> int:
        arr = self.arr
        return sum(int(arr[_HEAD + s * _FIELDS + what]) for s in slots)


# ---------------------------------------------------------------------------------------------
# helpers shared by workers


def raise_nofile() -> None:
    """Raise the soft open-file limit to the hard limit (the idle scenario needs thousands)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def pin_to(cpus: Sequence[int] | None) -> None:
    """Pin this process to `cpus` when they exist; a no-op for None or an empty list."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return
    available = os.sched_getaffinity(0) | set(range(os.cpu_count() or 1))
    wanted = {c for c in cpus if c in available}
    if wanted:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, wanted)


def _prepare(cpus: Sequence[int] | None) -> None:
    pin_to(cpus)
    raise_nofile()


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """Read exactly n bytes from a blocking socket with a timeout (never more)."""
    out = bytearray()
    for _ in range(n):
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise LoadError("connection closed by the broker")
        out += chunk
        if len(out) == n:
            break
    return bytes(out)


def open_client(
    host: str, port: int, client_id: str, keepalive: int = 600, timeout: float = SETUP_TIMEOUT
) -> socket.socket:
    """Connect, send CONNECT, wait for an accepting CONNACK; returns a blocking socket."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(wire.connect(client_id, keepalive))
    ack = recv_exact(sock, 4)
    if ack != wire.CONNACK_ACCEPTED:
        sock.close()
        raise LoadError(f"{client_id}: CONNACK {ack.hex()} is not an accepting one")
    return sock


def subscribe_client(sock: socket.socket, topic_filter: str, qos: int) -> None:
    """SUBSCRIBE one filter and wait for its SUBACK (reads exactly the SUBACK)."""
    sock.sendall(wire.subscribe(1, topic_filter, qos))
    ack = recv_exact(sock, 5)
    if ack[0] != wire.SUBACK << 4 or ack[1] != 3 or ack[4] != qos:
        raise LoadError(f"SUBACK {ack.hex()} does not grant QoS {qos} on {topic_filter!r}")


def send_all(
    sock: socket.socket,
    data: bytes | bytearray | memoryview,
    ctl: Control | None,
    deadline: float,
) -> bool:
    """Write everything to a non-blocking socket; False if told to stop or out of time first."""
    view = memoryview(data)
    done = 0
    total = len(view)
    for _ in range(1 << 62):
        if done >= total:
            return True
        try:
            done += sock.send(view[done:])
        except BlockingIOError:
            if (ctl is not None and ctl.flag(STOP)) or time.monotonic() > deadline:
                return False
            select.select([], [sock], [], 0.05)
    return False


def _wait_go(ctl: Control, deadline: float) -> bool:
    for _ in range(1 << 62):
        if ctl.flag(GO):
            return True
        if ctl.flag(STOP) or time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return False


def _close(sock: socket.socket, linger: float = 1.0) -> None:
    """DISCONNECT, then read until the broker closes (at most `linger` s), then close.

    Closing with unread bytes (PUBACKs) would send a TCP reset, and a reset can make the
    broker discard the last PUBLISHes it had not read yet: they would count as lost.
    """
    deadline = time.monotonic() + linger
    try:
        sock.setblocking(False)
        send_all(sock, wire.DISCONNECT, None, deadline)
        sock.shutdown(socket.SHUT_WR)
        for _ in range(100_000):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([sock], [], [], remaining)[0]:
                break
            try:
                if not sock.recv(1 << 16):
                    break
            except BlockingIOError:
                continue
    except OSError:
        pass
    sock.close()


@dataclass(frozen=True)
class Job:
    """What one worker process does; a worker ignores the fields it has no use for."""

    host: str
    port: int
    slot: int  # first (or only) counter slot of this worker
    cpus: tuple[int, ...] | None
    max_seconds: float
    client_id: str = ""
    client_ids: tuple[str, ...] = ()
    topic: str = ""
    topic_filter: str = ""
    qos: int = 0
    msg_size: int = 0
    pid_offset: int = -1
    pub_slots: range = range(0)
    sub_slots: range = range(0)
    fanout: int = 1
    batch: int = 128
    window: int = 0
    inflight: int = 32
    lowat: int = 0
    rate: float = 0.0
    count: int = 0
    concurrency: int = 200
    quiet_seconds: float = 5.0


# ---------------------------------------------------------------------------------------------
# workers: each runs in its own process


def qos0_publisher(ctl: Control, job: Job) -> None:
    """Send `batch` identical QoS 0 PUBLISHes per `send`, within the shared window."""
    _prepare(job.cpus)
    deadline = time.monotonic() + job.max_seconds
    packet = wire.publish(job.topic, b"x" * PAYLOAD_SIZE)
    blob = packet * job.batch
    sock = open_client(job.host, job.port, job.client_id)
    sock.setblocking(False)
    ctl.set(job.slot, READY, 1)
    if not _wait_go(ctl, deadline):
        return
    sent = 0
    limit = job.window * job.fanout
    for _ in range(1 << 62):
        if ctl.flag(STOP_PUB) or time.monotonic() > deadline:
            break
        if job.window:
            sent_all = ctl.total(SENT, job.pub_slots)
            if sent_all * job.fanout - ctl.total(DELIVERED, job.sub_slots) > limit:
                time.sleep(0.001)
                continue
        if not send_all(sock, blob, ctl, deadline):
            break
        sent += job.batch
        ctl.set(job.slot, SENT, sent)
    _close(sock)


def qos1_publisher(ctl: Control, job: Job) -> None:
    """Keep `inflight` QoS 1 PUBLISHes outstanding, sending one for each PUBACK.

    The kernel wakes this process once a quarter of the window has been acknowledged
    (SO_RCVLOWAT), or after 2 ms with whatever arrived, so in flight stays between 3/4 of
    `inflight` and `inflight` while the wake-ups (and the load generator's CPU) drop fourfold.
    """
    _prepare(job.cpus)
    deadline = time.monotonic() + job.max_seconds
    payload = b"x" * PAYLOAD_SIZE
    packets = [wire.publish(job.topic, payload, 1, pid) for pid in range(1, 0x10000)]
    size = len(packets[0])
    ring = memoryview(b"".join(packets) + b"".join(packets[: job.inflight]))
    del packets
    sock = open_client(job.host, job.port, job.client_id)
    sock.setblocking(False)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 4 * max(1, job.inflight // 4))
    buf = bytearray(1 << 16)
    ctl.set(job.slot, READY, 1)
    if not _wait_go(ctl, deadline):
        return
    index = 0  # next packet id - 1
    credits = job.inflight
    sent = 0
    ack_bytes = 0
    acked = 0
    for _ in range(1 << 62):
        if ctl.flag(STOP_PUB) or time.monotonic() > deadline:
            break
        n = credits
        if job.window and n:
            sent_all = ctl.total(SENT, job.pub_slots)
            n = min(n, job.window - (sent_all - ctl.total(DELIVERED, job.sub_slots)))
        if n > 0:
            if not send_all(sock, ring[index * size : (index + n) * size], ctl, deadline):
                break
            index = (index + n) % 0xFFFF
            credits -= n
            sent += n
            ctl.set(job.slot, SENT, sent)
        # wait for a quarter of the window to be acknowledged; then read whatever is there
        select.select([sock], [], [], 0.002 if credits == 0 else 0.001)
        try:
            got = sock.recv_into(buf)
        except BlockingIOError:
            continue
        if got == 0:
            raise LoadError(f"{job.client_id}: broker closed the connection")
        boundary = (-ack_bytes) % 4
        if boundary < got and buf[boundary] != wire.PUBACK << 4:
            ctl.add(job.slot, ERRORS, 1)
        ack_bytes += got
        new = ack_bytes // 4 - acked
        acked += new
        credits += new
    _close(sock)


def subscriber(ctl: Control, job: Job) -> None:
    """Several subscribers in one process; counts messages, PUBACKs QoS 1 in bulk.

    With `lowat` > 0 the kernel reports a socket readable only once `lowat` bytes are waiting;
    a sweep every 2 ms (1 ms for QoS 1, whose PUBACKs the broker waits for) reads whatever is
    left, so nothing waits for long.
    """
    _prepare(job.cpus)
    deadline = time.monotonic() + job.max_seconds
    socks = []
    for client_id in job.client_ids:
        sock = open_client(job.host, job.port, client_id)
        subscribe_client(sock, job.topic_filter, job.qos)
        sock.setblocking(False)
        if job.lowat:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, job.lowat)
        socks.append(sock)
    sel = selectors.DefaultSelector()
    for i, sock in enumerate(socks):
        sel.register(sock, selectors.EVENT_READ, i)
    everyone = list(range(len(socks)))
    timeout = (0.002 if job.qos == 0 else 0.001) if job.lowat else 0.05
    first_byte = (wire.PUBLISH << 4) | (job.qos << 1)
    totals = [0] * len(socks)
    pending = [bytearray() for _ in socks]
    buf = bytearray(RECV_BUFFER)
    view = memoryview(buf)
    for i in range(len(socks)):
        ctl.set(job.slot + i, READY, 1)
    for _ in range(1 << 62):
        if ctl.flag(STOP) or time.monotonic() > deadline:
            break
        ready = [key.data for key, _ in sel.select(timeout)] or everyone
        for i in ready:
            sock = socks[i]
            slot = job.slot + i
            try:
                n = sock.recv_into(buf)
            except BlockingIOError:
                continue
            if n == 0:
                raise LoadError(f"{job.client_ids[i]}: broker closed the connection")
            if job.qos == 0:
                boundary = (-totals[i]) % job.msg_size
                if boundary < n and buf[boundary] != first_byte:
                    ctl.add(slot, ERRORS, 1)
                totals[i] += n
                ctl.set(slot, DELIVERED, totals[i] // job.msg_size)
                continue
            data = pending[i]
            data += view[:n]
            k = len(data) // job.msg_size
            if not k:
                continue
            end = k * job.msg_size
            if data[0 : end : job.msg_size] != bytes([first_byte]) * k:
                ctl.add(slot, ERRORS, 1)
            acks = bytearray(4 * k)
            acks[0::4] = bytes([wire.PUBACK << 4]) * k
            acks[1::4] = b"\x02" * k
            acks[2::4] = data[job.pid_offset : end : job.msg_size]
            acks[3::4] = data[job.pid_offset + 1 : end : job.msg_size]
            del data[:end]
            totals[i] += k
            ctl.set(slot, DELIVERED, totals[i])
            if not send_all(sock, acks, ctl, deadline):
                break
    sel.close()
    for sock in socks:
        _close(sock)


def latency_publisher(ctl: Control, job: Job) -> None:
    """QoS 1 PUBLISHes on an absolute schedule of `rate` per second, send time in the payload.

    A late start is caught up rather than skipped, so a stall shows up in the latencies.
    """
    _prepare(job.cpus)
    deadline = time.monotonic() + job.max_seconds
    topic = "bench/lat"
    template = bytearray(wire.publish(topic, bytes(PAYLOAD_SIZE), 1, 1))
    _, pid_offset, payload_offset = wire.publish_layout(topic, PAYLOAD_SIZE, 1)
    sock = open_client(job.host, job.port, "bench-lat-pub")
    sock.setblocking(False)
    buf = bytearray(1 << 16)
    ctl.set(job.slot, READY, 1)
    if not _wait_go(ctl, deadline):
        return
    interval = int(1e9 / job.rate)
    next_at = time.monotonic_ns()
    seq = 0
    ack_bytes = 0
    for _ in range(1 << 62):
        if ctl.flag(STOP_PUB) or time.monotonic() > deadline:
            break
        now = time.monotonic_ns()
        if now >= next_at:
            struct.pack_into(">H", template, pid_offset, seq % 0xFFFF + 1)
            struct.pack_into(">qq", template, payload_offset, time.monotonic_ns(), seq)
            if not send_all(sock, template, ctl, deadline):
                break
            seq += 1
            ctl.set(job.slot, SENT, seq)
            next_at += interval
            continue
        readable, _, _ = select.select([sock], [], [], (next_at - now) / 1e9)
        if readable:
            try:
                got = sock.recv_into(buf)
            except BlockingIOError:
                continue
            if got == 0:
                raise LoadError("bench-lat-pub: broker closed the connection")
            ack_bytes += got
            ctl.set(job.slot, DELIVERED, ack_bytes // 4)
    _close(sock)


def latency_subscriber(ctl: Control, job: Job, results: Connection) -> None:
    """Timestamp each read, PUBACK every message; send (send times, latencies) at the end."""
    _prepare(job.cpus)
    deadline = time.monotonic() + job.max_seconds
    topic = "bench/lat"
    size, pid_offset, payload_offset = wire.publish_layout(topic, PAYLOAD_SIZE, 1)
    sock = open_client(job.host, job.port, "bench-lat-sub")
    subscribe_client(sock, topic, 1)
    sock.setblocking(False)
    buf = bytearray(1 << 16)
    data = bytearray()
    sent_at = array.array("q")
    latency = array.array("q")
    first_byte = (wire.PUBLISH << 4) | 2
    ctl.set(job.slot, READY, 1)
    for _ in range(1 << 62):
        if ctl.flag(STOP) or time.monotonic() > deadline:
            break
        readable, _, _ = select.select([sock], [], [], 0.05)
        if not readable:
            continue
        try:
            n = sock.recv_into(buf)
        except BlockingIOError:
            continue
        now = time.monotonic_ns()
        if n == 0:
            raise LoadError("bench-lat-sub: broker closed the connection")
        data += memoryview(buf)[:n]
        k = len(data) // size
        acks = bytearray()
        for j in range(k):
            base = j * size
            if data[base] != first_byte:
                ctl.add(job.slot, ERRORS, 1)
            ts, _seq = struct.unpack_from(">qq", data, base + payload_offset)
            sent_at.append(ts)
            latency.append(now - ts)
            acks += wire.puback(struct.unpack_from(">H", data, base + pid_offset)[0])
        del data[: k * size]
        ctl.set(job.slot, DELIVERED, len(latency))
        if acks and not send_all(sock, acks, ctl, deadline):
            break
    results.send((sent_at, latency))
    results.close()
    _close(sock)


def idle_worker(ctl: Control, job: Job) -> None:
    """Open `job.count` connections, at most `job.concurrency` handshakes at a time; hold them."""
    _prepare(job.cpus)
    t0 = time.monotonic_ns()
    deadline = time.monotonic() + job.max_seconds
    sel = selectors.DefaultSelector()
    pending: dict[int, tuple[socket.socket, int, bytearray]] = {}
    done: list[socket.socket] = []
    failures = 0
    next_index = 0
    for _ in range(1 << 62):
        if len(done) + failures >= job.count or time.monotonic() > deadline or ctl.flag(STOP):
            break
        while next_index < job.count and len(pending) < job.concurrency:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setblocking(False)
            err = sock.connect_ex((job.host, job.port))
            if err not in (0, errno.EINPROGRESS):
                failures += 1
                sock.close()
            else:
                sel.register(sock, selectors.EVENT_WRITE, sock.fileno())
                pending[sock.fileno()] = (sock, next_index, bytearray())
            next_index += 1
        for key, events in sel.select(0.1):
            sock, index, got = pending[key.data]
            ok = True
            if events & selectors.EVENT_WRITE:
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                    ok = False
                else:
                    packet = wire.connect(f"bench-idle-{index}", 600)
                    ok = sock.send(packet) == len(packet)
                    sel.modify(sock, selectors.EVENT_READ, key.data)
            else:
                try:
                    chunk = sock.recv(4 - len(got))
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                got += chunk
                ok = bool(chunk)
                if ok and len(got) == 4:
                    sel.unregister(sock)
                    del pending[key.data]
                    if got == wire.CONNACK_ACCEPTED:
                        done.append(sock)
                    else:
                        failures += 1
                        sock.close()
                    continue
            if not ok:
                sel.unregister(sock)
                del pending[key.data]
                failures += 1
                sock.close()
        ctl.set(job.slot, DELIVERED, len(done))
        ctl.set(job.slot, ERRORS, failures)
    for sock, _, _ in pending.values():
        sock.close()
    sel.close()
    ctl.set(job.slot, DELIVERED, len(done))
    ctl.set(job.slot, ERRORS, failures + len(pending))
    ctl.set(job.slot, VALUE, time.monotonic_ns() - t0)
    ctl.set(job.slot, READY, 2)
    for _ in range(1 << 62):
        if ctl.flag(STOP) or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    for sock in done:
        with contextlib.suppress(OSError):
            sock.send(wire.DISCONNECT)
        sock.close()


def retained_topic(index: int) -> str:
    return f"bench/ret/{index:06d}"


def retained_publisher(ctl: Control, job: Job) -> None:
    """Publish `job.count` retained QoS 1 messages (pipelined) and wait for every PUBACK."""
    _prepare(job.cpus)
    deadline = time.monotonic() + job.max_seconds
    payload = b"r" * PAYLOAD_SIZE
    blob = memoryview(
        b"".join(
            wire.publish(retained_topic(i), payload, 1, i % 0xFFFF + 1, retain=True)
            for i in range(job.count)
        )
    )
    size = len(blob) // job.count
    sock = open_client(job.host, job.port, "bench-ret-pub")
    sock.setblocking(False)
    buf = bytearray(1 << 16)
    ctl.set(job.slot, READY, 1)
    if not _wait_go(ctl, deadline):
        return
    t0 = time.monotonic_ns()
    sent = 0
    ack_bytes = 0
    for _ in range(1 << 62):
        acked = ack_bytes // 4
        if acked >= job.count or ctl.flag(STOP) or time.monotonic() > deadline:
            break
        n = min(job.inflight - (sent - acked), job.count - sent)
        if n > 0:
            if not send_all(sock, blob[sent * size : (sent + n) * size], ctl, deadline):
                break
            sent += n
            ctl.set(job.slot, SENT, sent)
        readable, _, _ = select.select([sock], [], [], 0.5)
        if readable:
            try:
                got = sock.recv_into(buf)
            except BlockingIOError:
                continue
            if got == 0:
                raise LoadError("bench-ret-pub: broker closed the connection")
            boundary = (-ack_bytes) % 4
            if boundary < got and buf[boundary] != wire.PUBACK << 4:
                ctl.add(job.slot, ERRORS, 1)
            ack_bytes += got
            ctl.set(job.slot, DELIVERED, ack_bytes // 4)
    ctl.set(job.slot, VALUE, time.monotonic_ns() - t0)
    ctl.set(job.slot, READY, 2)
    _close(sock)


def _count_retained(data: memoryview) -> tuple[set[bytes], int, int]:
    """(distinct retained `bench/ret/` topics, PUBLISH packets, SUBACK packets) in `data`."""
    topics: set[bytes] = set()
    publishes = 0
    subacks = 0
    for first, body, _end in wire.iter_packets(data):
        if first >> 4 == wire.PUBLISH:
            publishes += 1
            topic = wire.publish_topic(data, body)
            if first & 1 and topic.startswith(b"bench/ret/"):
                topics.add(topic)
        elif first >> 4 == wire.SUBACK:
            subacks += 1
    return topics, publishes, subacks


def retained_subscriber(ctl: Control, job: Job) -> None:
    """Subscribe to `#` and time until `job.count` retained messages have arrived; then verify."""
    _prepare(job.cpus)
    deadline = time.monotonic() + job.max_seconds
    msg_size, _, _ = wire.publish_layout(retained_topic(0), PAYLOAD_SIZE, 0)
    expected = 5 + job.count * msg_size
    buf = bytearray(expected + (1 << 16))
    view = memoryview(buf)
    sock = open_client(job.host, job.port, "bench-ret-sub")
    sock.setblocking(False)
    ctl.set(job.slot, READY, 1)
    if not _wait_go(ctl, deadline):
        return
    got = 0
    t0 = time.monotonic_ns()
    send_all(sock, wire.subscribe(1, "#", 0), ctl, deadline)
    for _ in range(1 << 62):
        if got >= expected:
            # the bytes are all there unless something else was retained too: count exactly
            topics, publishes, suback = _count_retained(view[:got])
            if len(topics) >= job.count:
                break
            expected = got + (job.count - len(topics)) * msg_size
        if got == len(buf):
            view.release()
            buf.extend(bytes(expected - got + (1 << 16)))
            view = memoryview(buf)
        if time.monotonic() > deadline:
            break
        readable, _, _ = select.select([sock], [], [], job.quiet_seconds)
        if not readable:
            break
        try:
            n = sock.recv_into(view[got:])
        except BlockingIOError:
            continue
        if n == 0:
            break
        got += n
    elapsed = time.monotonic_ns() - t0
    topics, publishes, suback = _count_retained(view[:got])
    ctl.set(job.slot, DELIVERED, len(topics))
    ctl.set(job.slot, EXTRA, publishes)
    ctl.set(job.slot, VALUE, elapsed)
    if suback != 1:
        ctl.add(job.slot, ERRORS, 1)
    ctl.set(job.slot, READY, 2)
    _close(sock)
