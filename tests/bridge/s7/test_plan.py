"""S7 read planning and the PDUs of the wire: as few requests as the PDU allows, never one
larger than it; requests byte for byte as python-snap7 builds them, answers item by item."""

from __future__ import annotations

import math
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from snap7.datatypes import S7Area, S7WordLen
from snap7.s7protocol import S7Protocol

from bridge.s7 import wire
from bridge.s7.plan import (
    ANSWER_HEADER,
    REQUEST_HEADER,
    REQUEST_ITEM,
    Item,
    Request,
    Span,
    describe,
    item_limit,
    plan_reads,
)


def reals(count: int, db: int = 1, start: int = 0) -> list[Span]:
    return [Span(f"r{i}", "DB", db, start + 4 * i, 4) for i in range(count)]


def test_adjacent_points_are_one_item_up_to_the_pdu() -> None:
    plan = plan_reads(reals(100), 480)
    assert len(plan) == 1 and [(i.start, i.size) for i in plan[0].items] == [(0, 400)]
    # 1,000 REALs: 4,000 bytes, 462 per answer: nine requests of one item each
    plan = plan_reads(reals(1000), 480)
    assert len(plan) == 9 == math.ceil(4000 / item_limit(480))
    assert all(r.answer_bytes <= 480 for r in plan)
    # a bigger PDU, fewer requests
    assert len(plan_reads(reals(1000), 960)) == 5


def test_holes_up_to_max_gap_are_read_across() -> None:
    spans = [Span("a", "DB", 1, 0, 2), Span("b", "DB", 1, 10, 2)]
    assert len(plan_reads(spans, 480, max_gap=8)[0].items) == 1
    assert len(plan_reads(spans, 480, max_gap=7)[0].items) == 2
    assert plan_reads(spans, 480, max_gap=8)[0].items[0].unused == 8


def test_scattered_blocks_share_requests_up_to_the_item_limit() -> None:
    spans = [Span(f"db{n}", "DB", n, 0, 2) for n in range(1, 31)]
    plan = plan_reads(spans, 480)
    assert [len(r.items) for r in plan] == [20, 10]
    assert len(plan_reads(spans, 240)[0].items) == (240 - REQUEST_HEADER) // REQUEST_ITEM


def test_a_point_longer_than_one_item_is_read_in_chunks() -> None:
    long = Span("text", "DB", 2, 0, 512)  # WSTRING[254]
    plan = plan_reads([long, Span("x", "M", 0, 0, 1)], 480)
    chunks = sorted((i.start, i.size) for r in plan for i in r.items if i.area == "DB")
    assert chunks == [(0, 462), (462, 50)]
    assert all(r.answer_bytes <= 480 for r in plan) and len(plan) == 2


def test_points_alone_are_never_merged() -> None:
    spans = [Span("a", "DB", 1, 250, 2), Span("b", "DB", 1, 254, 4)]
    assert len(plan_reads(spans, 480, max_gap=16)[0].items) == 1
    assert len(plan_reads(spans, 480, max_gap=16, alone=frozenset({"b"}))[0].items) == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["DB", "M", "I", "Q"]), st.integers(1, 4),
                          st.integers(0, 3000), st.integers(1, 600)), min_size=1, max_size=60),
       st.sampled_from([240, 480, 960]), st.integers(0, 32))
def test_every_plan_covers_each_point_and_fits_the_pdu(
        raw: list[tuple[str, int, int, int]], pdu: int, gap: int) -> None:
    spans = [Span(f"p{i}", area, db if area == "DB" else 0, start, size)
             for i, (area, db, start, size) in enumerate(raw)]
    plan = plan_reads(spans, pdu, gap)
    limit = item_limit(pdu)
    for request in plan:
        assert request.answer_bytes <= pdu
        assert REQUEST_HEADER + REQUEST_ITEM * len(request.items) <= pdu
        assert len(request.items) <= 20
    for span in spans:
        covered: set[int] = set()
        carriers = [i for r in plan for i in r.items if span in i.spans]
        for item in carriers:
            assert item.area == span.area and item.db == span.db
            covered.update(range(max(item.start, span.start), min(item.end, span.end)))
        assert covered == set(range(span.start, span.end)), span
        if span.size <= limit:
            assert len(carriers) == 1  # never split unless longer than an item
    # no more requests than the bytes need, give or take the packing
    need = sum(i.cost for r in plan for i in r.items) / (pdu - ANSWER_HEADER)
    assert len(plan) <= math.ceil(need) * 2


def test_read_requests_match_python_snap7s() -> None:
    items = (Item("DB", 10, 4, 8, ()), Item("M", 0, 2, 3, ()), Item("I", 0, 64, 2, ()),
             Item("Q", 0, 0, 1, ()))
    protocol = S7Protocol()
    expected = protocol.build_multi_read_request(
        [(S7Area.DB, 10, 4, 8), (S7Area.MK, 0, 2, 3), (S7Area.PE, 0, 64, 2),
         (S7Area.PA, 0, 0, 1)])
    sequence = struct.unpack(">H", expected[4:6])[0]
    assert wire.encode_read(Request(items), sequence) == expected
    single = protocol.build_write_request(S7Area.DB, 1, 120, S7WordLen.BYTE, b"\x42\xf5\x00\x00")
    sequence = struct.unpack(">H", single[4:6])[0]
    assert wire.encode_write("DB", 1, 120, None, b"\x42\xf5\x00\x00", sequence) == single
    bit = protocol.build_write_request(S7Area.MK, 0, 8 * 3 + 5, S7WordLen.BIT, b"\x01")
    sequence = struct.unpack(">H", bit[4:6])[0]
    assert wire.encode_write("M", 0, 3, 5, b"\x01", sequence) == bit


def answer(sequence: int, items: list[tuple[int, bytes]], error: int = 0) -> bytes:
    data = b""
    for index, (code, payload) in enumerate(items):
        data += struct.pack(">BBH", code, 0x04 if code == 0xFF else 0, len(payload) * 8)
        data += payload + (b"\x00" if len(payload) % 2 and index < len(items) - 1 else b"")
    params = bytes([0x04, len(items)])
    return struct.pack(">BBHHHHH", 0x32, 0x03, 0, sequence, len(params), len(data), error) \
        + params + data


def test_answers_are_taken_apart_item_by_item() -> None:
    request = Request((Item("DB", 1, 0, 3, ()), Item("DB", 99, 0, 2, ()),
                       Item("M", 0, 0, 2, ())))
    got = wire.parse_read(answer(7, [(0xFF, b"abc"), (0x0A, b""), (0xFF, b"xy")]), request, 7)
    assert got[0] == b"abc" and got[2] == b"xy"
    assert isinstance(got[1], wire.ItemError)
    assert got[1].reason(request.items[1]) == "DB99 does not exist on the PLC"
    assert "optimized block access" in wire.ItemError(0x05).reason(request.items[0])
    assert "PUT/GET" in wire.ItemError(0x03).reason(request.items[2])
    try:
        wire.parse_read(answer(7, [], error=0x8104), request, 7)
    except wire.RefusedError as exc:
        assert "0x8104" in str(exc) and "PUT/GET communication permitted" in str(exc)
    else:
        raise AssertionError("a refused request is an error")
    try:
        wire.parse_read(answer(8, [(0xFF, b"abc")]), request, 7)
    except wire.ProtocolError as exc:
        assert "answer 8 to request 7" in str(exc)
    else:
        raise AssertionError("an answer to another request is an error")


def test_describe_names_each_item_and_its_points() -> None:
    plan = plan_reads([Span("speed", "DB", 10, 0, 4), Span("run", "M", 0, 0, 1),
                       Span("t", "T", 0, 4, 2)], 480)
    lines = describe(plan, 480)
    assert lines[0] == "request 1: 3 item(s), answer 34 of 480 bytes"
    assert any("DB10.DBB0..DBB3" in line and "speed" in line for line in lines)
    assert any("MB0..MB0" in line and "run" in line for line in lines)
    assert any("T2..T2" in line for line in lines)
