"""Serial framing (fed whole, byte by byte, with garbage) and parsing (regex, struct, NMEA)."""

from __future__ import annotations

import re
import struct

import pytest

from bridge.modbus.convert import ValueSpec
from bridge.serial.framing import FixedFramer, LineFramer, MarkerFramer, make_framer
from bridge.serial.parse import (
    ParseError,
    nmea_checksum,
    nmea_coordinate,
    parse_nmea,
    parse_regex,
    parse_struct,
    point_value,
)

# The GGA example of the NMEA 0183 references (gpsd's and Wikipedia's documentation).
GGA = b"$GPGGA,123519,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,*47"
RMC = b"$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*6A"


def feed_all(framer: LineFramer | FixedFramer | MarkerFramer, data: bytes,
             byte_by_byte: bool) -> list[bytes]:
    if not byte_by_byte:
        return framer.feed(data)
    return [frame for i in range(len(data)) for frame in framer.feed(data[i:i + 1])]


@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_line_framing(byte_by_byte: bool) -> None:
    framer = LineFramer(b"\r\n", max_frame=16)
    data = b"T=21.5\r\nT=21.6\r\n" + b"x" * 40 + b"\r\nT=21.7\r\nT=2"
    assert feed_all(framer, data, byte_by_byte) == [b"T=21.5", b"T=21.6", b"T=21.7"]
    assert framer.dropped == 42  # the over-long line and its delimiter
    assert framer.feed(b"1.8\r\n") == [b"T=21.8"]  # the partial line was kept


@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_fixed_framing(byte_by_byte: bool) -> None:
    framer = FixedFramer(4)
    assert feed_all(framer, b"abcdefghij", byte_by_byte) == [b"abcd", b"efgh"]
    assert framer.reset() == 2 and framer.dropped == 2


@pytest.mark.parametrize("byte_by_byte", [False, True])
def test_marker_framing_drops_garbage_and_cut_frames(byte_by_byte: bool) -> None:
    framer = MarkerFramer(b"\x02", b"\x03", max_frame=8)
    data = b"noise\x02ok1\x03\x02cut\x02ok2\x03junk\x02" + b"z" * 20 + b"\x03\x02ok3\x03tail"
    assert feed_all(framer, data, byte_by_byte) == [b"ok1", b"ok2", b"ok3"]
    assert framer.dropped > 0
    assert make_framer("markers", start=b"<", end=b">").feed(b"<a><b") == [b"a"]


def test_regex_parser() -> None:
    pattern = re.compile(r"T=(?P<temp>-?\d+\.\d+)(?: H=(?P<hum>\d+))?")
    assert parse_regex(pattern, b"T=21.5 H=40\r") == {"temp": "21.5", "hum": "40"}
    assert parse_regex(pattern, b"T=-3.25") == {"temp": "-3.25"}
    with pytest.raises(ParseError, match="does not match"):
        parse_regex(pattern, b"garbage")
    with pytest.raises(ParseError, match="not ascii"):
        parse_regex(pattern, b"T=\xff")


def test_struct_parser() -> None:
    layout = struct.Struct("<hHf")
    frame = layout.pack(-215, 40, 1013.25)
    assert parse_struct(layout, ["temp", "hum", "press"], frame) == {
        "temp": -215, "hum": 40, "press": 1013.25}
    with pytest.raises(ParseError, match="needs 8"):
        parse_struct(layout, ["temp", "hum", "press"], frame[:5])


def test_nmea_sentences_and_checksums() -> None:
    assert nmea_checksum(GGA[1:GGA.index(b"*")]) == 0x47
    record = parse_nmea(GGA + b"\r")
    assert record["GGA.2"] == record["GPGGA.2"] == "4807.038"
    assert record["GGA.9"] == "545.4"
    assert parse_nmea(RMC)["RMC.7"] == "022.4"
    with pytest.raises(ParseError, match="checksum mismatch"):
        parse_nmea(GGA.replace(b"545.4", b"545.5"))
    with pytest.raises(ParseError, match="without checksum"):
        parse_nmea(GGA.split(b"*")[0])
    with pytest.raises(ParseError, match="must start"):
        parse_nmea(b"GPGGA,1*00")


def test_point_values() -> None:
    record = parse_nmea(GGA)
    lat = point_value(record, "GGA.2", "coordinate", ValueSpec("float64"))
    lon = point_value(record, "GGA.4", "coordinate", ValueSpec("float64"))
    assert lat is not None and lat[1] == "good" and lat[0] == pytest.approx(48.1173)
    assert lon is not None and lon[1] == "good" and lon[0] == pytest.approx(11.516667)
    assert nmea_coordinate("4807.038", "S") == pytest.approx(-48.1173)
    assert point_value(record, "GGA.7", "int", ValueSpec("int64")) == (8, "good")
    assert point_value(record, "GGA.13", "float", ValueSpec("float64")) == (None, "bad")
    assert point_value(record, "GGA.99", "float", ValueSpec("float64")) is None
    spec = ValueSpec("float64", scale=0.1, minimum=0, maximum=100, precision=1)
    assert point_value({"t": "215"}, "t", "float", spec) == (21.5, "good")
    assert point_value({"t": "1215"}, "t", "float", spec) == (121.5, "uncertain")
    assert point_value({"t": "x"}, "t", "float", spec) == (None, "bad")
    assert point_value({"on": "ON"}, "on", "bool", spec) == (True, "good")
