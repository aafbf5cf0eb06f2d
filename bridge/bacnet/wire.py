"""BACnet/IP frames and the services the bridge uses, encoded and decoded (sans-I/O).

How this works: a datagram is a BVLC header (0x81, function, length: original unicast or
broadcast NPDU, or a forwarded NPDU with the originator's address), an NPDU (version 1,
control, the destination network and MAC when the device sits behind a router, the source
network and MAC when the answer comes from behind one, a hop count) and an APDU: a confirmed
request (invoke id, service choice), an unconfirmed request, or an answer to a confirmed one
(simple ack, complex ack, error, reject, abort). The bridge sends ReadProperty,
ReadPropertyMultiple, WriteProperty, SubscribeCOV and Who-Is, never segmented, and says it
accepts no segmented answer (it plans requests so the answers fit: bridge/bacnet/plan.py);
it takes I-Am, COV notifications (unconfirmed and confirmed) and the answers.

`parse` reads a datagram's headers into a `Packet` (DecodeError for one that is not BACnet or
is cut short); the service decoders read its APDU's service data from `Packet.body`.

Pure: bytes in, bytes or values out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from bridge.bacnet.tags import (
    CLOSE,
    ENUMERATED,
    OPEN,
    DecodeError,
    app_value,
    closing,
    ctx_boolean,
    ctx_object,
    ctx_unsigned,
    opening,
    read_tag,
    skip,
    unsigned,
)

# APDU types (high nibble of the first octet)
CONFIRMED, UNCONFIRMED, SIMPLE_ACK, COMPLEX_ACK, SEGMENT_ACK, ERROR, REJECT, ABORT = range(8)
# confirmed services
CONFIRMED_COV_NOTIFICATION: Final = 1
SUBSCRIBE_COV: Final = 5
READ_PROPERTY: Final = 12
READ_PROPERTY_MULTIPLE: Final = 14
WRITE_PROPERTY: Final = 15
# unconfirmed services
I_AM: Final = 0
UNCONFIRMED_COV_NOTIFICATION: Final = 2
WHO_IS: Final = 8
# properties
PRESENT_VALUE, STATUS_FLAGS, UNITS, OBJECT_NAME, MAX_APDU, VENDOR_NAME, MODEL_NAME, \
    OBJECT_LIST, NUMBER_OF_STATES = 85, 111, 117, 77, 62, 121, 70, 76, 74
DEVICE: Final = 8
# the max-APDU codes of a confirmed request's second octet
APDU_SIZES: Final = (50, 128, 206, 480, 1024, 1476)
REJECT_REASONS: Final = ("other", "buffer-overflow", "inconsistent-parameters",
                         "invalid-parameter-data-type", "invalid-tag", "missing-required-parameter",
                         "parameter-out-of-range", "too-many-arguments", "undefined-enumeration",
                         "unrecognized-service")
ABORT_REASONS: Final = ("other", "buffer-overflow", "invalid-apdu-in-this-state",
                        "preempted-by-higher-priority-task", "segmentation-not-supported",
                        "security-error", "insufficient-security", "window-size-out-of-range",
                        "application-exceeded-reply-time", "out-of-resources", "tsm-timeout",
                        "apdu-too-long")


@dataclass(frozen=True, slots=True)
class Route:
    """Where a device is: its B/IP address, and behind a router its network number and MAC."""

    host: str
    port: int
    network: int | None = None
    mac: bytes = b""

    def __str__(self) -> str:
        where = f"{self.host}:{self.port}"
        return where if self.network is None else f"{where} network {self.network} MAC " \
            f"{self.mac.hex() or '(broadcast)'}"


@dataclass(slots=True)
class Packet:
    """A datagram's headers, and its APDU for the service decoders."""

    kind: int  # APDU type
    invoke: int | None  # confirmed requests and their answers
    service: int | None  # None for reject and abort
    body: bytes  # the APDU
    at: int  # where the service data (or the reject / abort reason) starts in `body`
    network: int | None = None  # SNET: the answer came from behind a router
    mac: bytes = b""  # SADR
    segmented: bool = False


@dataclass(frozen=True, slots=True)
class PropertyError:
    """A property the device could not read (in a ReadPropertyMultiple answer)."""

    error_class: int
    error_code: int


# -- encoding ---------------------------------------------------------------------------------

def frame(apdu: bytes, route: Route | None, expecting_reply: bool = False) -> bytes:
    """BVLC + NPDU + `apdu`, unicast to `route`; `route` None: a global broadcast."""
    control = 0x04 if expecting_reply else 0x00
    if route is None:
        npdu = bytes([1, control | 0x20, 0xFF, 0xFF, 0, 0xFF])
        function = 0x0B
    elif route.network is not None:
        npdu = bytes([1, control | 0x20]) + route.network.to_bytes(2, "big") + bytes(
            [len(route.mac)]) + route.mac + b"\xff"
        function = 0x0A
    else:
        npdu = bytes([1, control])
        function = 0x0A
    size = 4 + len(npdu) + len(apdu)
    return bytes([0x81, function]) + size.to_bytes(2, "big") + npdu + apdu


def apdu_code(max_apdu: int) -> int:
    """The code of the largest standard APDU size not above `max_apdu`."""
    return max(i for i, size in enumerate(APDU_SIZES) if size <= max(max_apdu, 50))


def confirmed(invoke: int, service: int, data: bytes, max_apdu: int = 1476) -> bytes:
    """A confirmed request APDU (no segmentation, answers up to `max_apdu` accepted)."""
    return bytes([0x00, apdu_code(max_apdu), invoke, service]) + data


def unconfirmed(service: int, data: bytes) -> bytes:
    """An unconfirmed request APDU."""
    return bytes([0x10, service]) + data


def simple_ack(invoke: int, service: int) -> bytes:
    """The simple ack of a confirmed request (a confirmed COV notification)."""
    return bytes([0x20, invoke, service])


def who_is(low: int | None = None, high: int | None = None) -> bytes:
    """A Who-Is APDU, for every device or for the instances low..high."""
    data = b"" if low is None or high is None else ctx_unsigned(0, low) + ctx_unsigned(1, high)
    return unconfirmed(WHO_IS, data)


def read_property(kind: int, instance: int, prop: int) -> bytes:
    """ReadProperty's service data."""
    return ctx_object(0, kind, instance) + ctx_unsigned(1, prop)


def read_property_multiple(specs: list[tuple[int, int, tuple[int, ...]]]) -> bytes:
    """ReadPropertyMultiple's service data: (object type, instance, properties) per object."""
    parts = []
    for kind, instance, props in specs:
        parts.append(ctx_object(0, kind, instance) + opening(1)
                     + b"".join(ctx_unsigned(0, p) for p in props) + closing(1))
    return b"".join(parts)


def write_property(kind: int, instance: int, prop: int, value: bytes,
                   priority: int | None) -> bytes:
    """WriteProperty's service data (`value`: application-tagged, e.g. tags.app_real)."""
    data = ctx_object(0, kind, instance) + ctx_unsigned(1, prop) + opening(3) + value + \
        closing(3)
    return data if priority is None else data + ctx_unsigned(4, priority)


def subscribe_cov(process: int, kind: int, instance: int, lifetime: int | None) -> bytes:
    """SubscribeCOV's service data: unconfirmed notifications for `lifetime` seconds, or, with
    `lifetime` None, the cancellation."""
    data = ctx_unsigned(0, process) + ctx_object(1, kind, instance)
    if lifetime is None:
        return data
    return data + ctx_boolean(2, False) + ctx_unsigned(3, lifetime)


# -- decoding ---------------------------------------------------------------------------------

def parse(datagram: bytes) -> Packet:
    """A datagram's BVLC, NPDU and APDU headers; DecodeError when it is not BACnet/IP."""
    if len(datagram) < 6 or datagram[0] != 0x81:
        raise DecodeError("not a BACnet/IP datagram")
    function = datagram[1]
    if int.from_bytes(datagram[2:4], "big") != len(datagram):
        raise DecodeError("BVLC length does not match the datagram")
    at = 4
    if function == 0x04:
        at = 10  # forwarded: the originator's address and port
    elif function not in (0x0A, 0x0B):
        raise DecodeError(f"BVLC function {function:#04x} carries no NPDU for a client")
    if at + 2 > len(datagram) or datagram[at] != 1:
        raise DecodeError("not an NPDU of version 1")
    control = datagram[at + 1]
    at += 2
    network: int | None = None
    mac = b""
    try:
        if control & 0x20:
            at += 3 + datagram[at + 2]
        if control & 0x08:
            network = datagram[at] << 8 | datagram[at + 1]
            length = datagram[at + 2]
            mac = datagram[at + 3:at + 3 + length]
            at += 3 + length
        if control & 0x20:
            at += 1
        if control & 0x80:
            raise DecodeError("a network layer message")
        apdu = datagram[at:]
        kind = apdu[0] >> 4
        if kind == CONFIRMED:
            segmented = bool(apdu[0] & 0x08)
            start = 6 if segmented else 4
            return Packet(kind, apdu[2], apdu[start - 1], apdu, start, network, mac, segmented)
        if kind == UNCONFIRMED:
            return Packet(kind, None, apdu[1], apdu, 2, network, mac)
        if kind in (SIMPLE_ACK, ERROR):
            return Packet(kind, apdu[1], apdu[2], apdu, 3, network, mac)
        if kind == COMPLEX_ACK:
            segmented = bool(apdu[0] & 0x08)
            start = 5 if segmented else 3
            return Packet(kind, apdu[1], apdu[start - 1], apdu, start, network, mac, segmented)
        if kind in (REJECT, ABORT, SEGMENT_ACK):
            return Packet(kind, apdu[1], None, apdu, 2, network, mac)
    except IndexError:
        raise DecodeError("truncated NPDU or APDU") from None
    raise DecodeError(f"APDU type {kind} is unknown")


def _values(data: bytes, at: int, number: int) -> tuple[Any, int]:
    """Application values up to the closing tag `number`: one value, or a list of several."""
    found: list[Any] = []
    while True:
        tag, context, kind, length, start = read_tag(data, at)
        if kind == CLOSE and tag == number:
            return (found[0] if len(found) == 1 else found), start
        if context:  # a constructed value (e.g. a priority array of a structure): kept raw
            end = skip(data, at)
            found.append(bytes(data[at:end]).hex())
            at = end
            continue
        found.append(app_value(data, tag, length, start))
        at = start if tag == 1 else start + length


def _expect(data: bytes, at: int, number: int, kind: int = 0) -> tuple[int, int]:
    tag, context, got, length, start = read_tag(data, at)
    if not context or tag != number or got != kind:
        raise DecodeError(f"expected context tag {number}")
    return length, start


def error_of(packet: Packet) -> tuple[int, int]:
    """An Error PDU's (error class, error code); the first two enumerations in its data."""
    data, at = packet.body, packet.at
    found: list[int] = []
    while at < len(data) and len(found) < 2:
        tag, context, kind, length, start = read_tag(data, at)
        if not context and tag == ENUMERATED:
            found.append(unsigned(data, start, length))
        at = start + (length if kind == 0 else 0)
    if len(found) < 2:
        raise DecodeError("an error without class and code")
    return found[0], found[1]


def reason_of(packet: Packet) -> str:
    """A reject's or abort's reason."""
    if len(packet.body) < 3:
        raise DecodeError("a reject or abort without a reason")
    code = packet.body[2]
    names = REJECT_REASONS if packet.kind == REJECT else ABORT_REASONS
    what = "rejected" if packet.kind == REJECT else "aborted"
    return f"{what}: {names[code] if code < len(names) else code}"


def parse_read_property(packet: Packet) -> Any:
    """The value(s) of a ReadProperty ack."""
    data = packet.body
    _, at = _expect(data, packet.at, 0)
    at += 4
    length, at = _expect(data, at, 1)
    at += length
    tag, context, kind, length, start = read_tag(data, at)
    if context and tag == 2 and kind == 0:  # an array index
        at = start + length
    _, at = _expect(data, at, 3, OPEN)
    return _values(data, at, 3)[0]


def parse_read_property_multiple(packet: Packet,
                                 ) -> list[tuple[int, int, dict[int, Any]]]:
    """A ReadPropertyMultiple ack: (object type, instance, {property: value or
    PropertyError}) per object, in the order asked."""
    data, at, end = packet.body, packet.at, len(packet.body)
    found = []
    while at < end:
        _, at = _expect(data, at, 0)
        word = unsigned(data, at, 4)
        at += 4
        _, at = _expect(data, at, 1, OPEN)
        props: dict[int, Any] = {}
        while True:
            tag, context, kind, length, start = read_tag(data, at)
            if kind == CLOSE and tag == 1:
                at = start
                break
            if not context or tag != 2:
                raise DecodeError("expected a property identifier")
            prop = unsigned(data, start, length)
            at = start + length
            tag, context, kind, length, start = read_tag(data, at)
            if context and tag == 3 and kind == 0:  # an array index
                at = start + length
                tag, context, kind, length, start = read_tag(data, at)
            if kind == OPEN and tag == 4:
                props[prop], at = _values(data, start, 4)
            elif kind == OPEN and tag == 5:
                pair = []
                at = start
                for _ in range(2):
                    _, _, _, length, start = read_tag(data, at)
                    pair.append(unsigned(data, start, length))
                    at = start + length
                _, at = _expect(data, at, 5, CLOSE)
                props[prop] = PropertyError(pair[0], pair[1])
            else:
                raise DecodeError("expected a property value or error")
        found.append((word >> 22, word & 0x3FFFFF, props))
    return found


def parse_cov(packet: Packet) -> tuple[int, int, int, int, dict[int, Any]]:
    """A COV notification: (subscriber process, object type, instance, seconds remaining,
    {property: value})."""
    data = packet.body
    length, at = _expect(data, packet.at, 0)
    process = unsigned(data, at, length)
    _, at = _expect(data, at + length, 1)
    _, at = _expect(data, at + 4, 2)
    word = unsigned(data, at, 4)
    length, at = _expect(data, at + 4, 3)
    remaining = unsigned(data, at, length)
    _, at = _expect(data, at + length, 4, OPEN)
    props: dict[int, Any] = {}
    while True:
        tag, context, kind, length, start = read_tag(data, at)
        if kind == CLOSE and tag == 4:
            break
        if not context or tag != 0:
            raise DecodeError("expected a property identifier")
        prop = unsigned(data, start, length)
        at = start + length
        tag, context, kind, length, start = read_tag(data, at)
        if context and tag == 1 and kind == 0:  # an array index
            at = start + length
        _, at = _expect(data, at, 2, OPEN)
        props[prop], at = _values(data, at, 2)
        tag, context, kind, length, start = read_tag(data, at)
        if context and tag == 3 and kind == 0:  # a priority
            at = start + length
    return process, word >> 22, word & 0x3FFFFF, remaining, props


def parse_i_am(packet: Packet) -> tuple[int, int, int, int]:
    """An I-Am: (device instance, max APDU accepted, segmentation, vendor id)."""
    data, at = packet.body, packet.at
    found: list[Any] = []
    for _ in range(4):
        tag, context, _, length, start = read_tag(data, at)
        if context:
            raise DecodeError("an I-Am has application tags only")
        found.append(app_value(data, tag, length, start))
        at = start + length
    if not isinstance(found[0], tuple) or found[0][0] != DEVICE:
        raise DecodeError("an I-Am names a device object")
    return int(found[0][1]), int(found[1]), int(found[2]), int(found[3])
