"""The EtherNet/IP family's pure parts: tag names as paths, Logix values, read planning.

The bytes of the paths are the ones Rockwell's Logix data access manual (1756-PM020) gives
for its examples; the simulator tests (test_simulator.py) show a real peer takes them.
"""

from __future__ import annotations

import struct

import pytest

from bridge.enip import values, wire
from bridge.enip.config import EnipDeviceConfig
from bridge.enip.device import point_read
from bridge.enip.plan import answer_size, limit, plan_reads
from bridge.enip.tags import canonical, parse_tag, tag_path


def test_tag_names_become_symbolic_paths() -> None:
    assert tag_path("Speed") == b"\x91\x05Speed\x00"  # odd length: a pad byte
    assert tag_path("Motor.Run") == b"\x91\x05Motor\x00\x91\x03Run\x00"
    assert tag_path("Recipe[3]") == b"\x91\x06Recipe\x28\x03"
    assert tag_path("Grid[1,300]") == b"\x91\x04Grid\x28\x01\x29\x00\x2c\x01"
    assert tag_path("Big[70000]") == b"\x91\x03Big\x00\x2a\x00" + struct.pack("<I", 70000)
    assert tag_path("Program:Main.Count")[:14] == b"\x91\x0cProgram:Main"
    assert parse_tag("Line[2].Motor.Speed") == [("Line", (2,)), ("Motor", ()), ("Speed", ())]
    assert canonical("Grid[ 1 , 2 ]") == "Grid[1,2]"


@pytest.mark.parametrize("bad", ["", "1Speed", "Motor..Speed", "Program:Main", "Speed[a]",
                                 "Main Count"])
def test_what_is_not_a_tag_name_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_tag(bad)


@pytest.mark.parametrize(("kind", "value"), [
    ("BOOL", True), ("SINT", -128), ("INT", 32767), ("DINT", -2**31), ("LINT", 2**63 - 1),
    ("USINT", 255), ("UINT", 65535), ("UDINT", 2**32 - 1), ("ULINT", 2**64 - 1),
    ("REAL", 1.5), ("LREAL", 1e300), ("STRING", "line 2")])
def test_a_written_value_reads_back_as_itself(kind: str, value: object) -> None:
    type_bytes, count, data, written = values.encode(kind, value, None, None, None, None)
    assert count == 1 and written == value
    assert values.decode(kind, 1, type_bytes + data) == [value]


@pytest.mark.parametrize(("kind", "value", "reason"), [
    ("SINT", 128, "out of range"), ("UINT", -1, "out of range"), ("DINT", 1.5, "whole"),
    ("REAL", 1e39, "out of range"), ("REAL", float("nan"), "finite"),
    ("BOOL", 1, "true or false"), ("DINT", "7", "a number"), ("STRING", 7, "a string"),
    ("STRING", "x" * 83, "do not fit"), ("STRING", "☃", "cannot hold")])
def test_a_value_the_type_cannot_take_is_refused(kind: str, value: object,
                                                 reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        values.encode(kind, value, None, None, None, None)


def test_bounds_and_labels_of_a_write() -> None:
    with pytest.raises(ValueError, match="above max 100"):
        values.encode("REAL", 100.5, None, 0, 100, None)
    labels = {0: "off", 2: "manual"}
    assert values.encode("DINT", "manual", None, None, None, labels)[2] == struct.pack("<i", 2)
    with pytest.raises(ValueError, match="not one of"):
        values.encode("DINT", 1, None, None, None, labels)


def test_an_answer_of_another_type_is_a_mismatch_not_a_number() -> None:
    with pytest.raises(values.TypeMismatchError, match="controller says LINT, the point "
                                                       "says REAL"):
        values.decode("REAL", 1, struct.pack("<Hq", 0xC5, 7))
    # an element of a BOOL array comes as its 32-bit word
    assert values.decode("BOOL", 1, struct.pack("<HI", 0xD3, 1)) == [True]


def test_reads_are_packed_up_to_the_connection_size() -> None:
    config = EnipDeviceConfig.model_validate({
        "name": "plc", "host": "10.0.0.1", "points": [
            *({"name": f"t{i}", "tag": f"Tag{i}", "type": "DINT"} for i in range(300)),
            {"name": "long", "tag": "Levels", "type": "REAL", "elements": 1000}]})
    reads = [point_read(point) for point in config.points]
    for size in (500, 4000):
        plan = plan_reads(reads, size)
        planned = [read.key for request in plan for read in request.reads]
        assert sorted(planned) == sorted(read.key for read in reads)  # each read once
        for request in plan:
            if request.fragmented:
                assert len(request.reads) == 1 and answer_size(request.reads) > limit(size)
                continue
            assert request.request_bytes <= limit(size)
            assert request.answer_bytes <= limit(size)
    assert len(plan_reads(reads, 4000)) < len(plan_reads(reads, 500))


def test_a_multiple_service_answer_must_answer_what_was_sent() -> None:
    services = [wire.read_tag(tag_path("A"), 1), wire.read_tag(tag_path("B"), 1)]
    first = bytes((0xCC, 0, 0, 0)) + struct.pack("<Hi", 0xC4, 5)
    second = bytes((0xCC, 0, 0x05, 0))  # no such tag
    body = struct.pack("<3H", 2, 6, 6 + len(first)) + first + second
    answer = bytes((0x8A, 0, 0x1E, 0)) + body
    replies = wire.parse_multiple(answer, services)
    assert replies[0].ok and values.decode("DINT", 1, replies[0].data) == [5]
    assert not replies[1].ok and "no such tag" in replies[1].reason()
    with pytest.raises(wire.ProtocolError):
        wire.parse_multiple(answer, services[:1])
    with pytest.raises(wire.ProtocolError):
        wire.parse_multiple(bytes((0xCC, 0, 0, 0)) + body, services)
