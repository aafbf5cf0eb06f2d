"""The sans-I/O Modbus frame codec: exact bytes, whole and byte by byte, with trailing bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pymodbus.framer.rtu import FramerRTU

from bridge.modbus.frames import (
    Request,
    crc16,
    parse_pdu,
    rtu_adu,
    rtu_silence,
    scan_rtu,
    scan_tcp,
    tcp_adu,
)

TRAILER = bytes.fromhex("DEADBEEF")


def rtu(unit: int, pdu: bytes) -> bytes:
    crc = crc16(bytes((unit,)) + pdu)
    return bytes((unit,)) + pdu + bytes((crc & 0xFF, crc >> 8))


def registers_response(unit: int, values: list[int], function: int = 3) -> bytes:
    return rtu(unit, struct.pack(f">BB{len(values)}H", function, 2 * len(values), *values))


# -- requests -----------------------------------------------------------------------------------

# The request examples of the Modbus serial line spec / simplymodbus.org (unit 0x11).
@pytest.mark.parametrize(("request_", "hexframe"), [
    (Request(1, 3, 0, 10), "01 03 0000 000A C5CD"),
    (Request(17, 1, 0x13, 0x25), "11 01 0013 0025 0E84"),
    (Request(17, 3, 0x6B, 3), "11 03 006B 0003 7687"),
    (Request(17, 5, 0xAC, 1, (1,)), "11 05 00AC FF00 4E8B"),
    (Request(17, 6, 1, 1, (3,)), "11 06 0001 0003 9A9B"),
    (Request(17, 15, 0x13, 10, (1, 0, 1, 1, 0, 0, 1, 1, 1, 0)), "11 0F 0013 000A 02 CD01 BF0B"),
    (Request(17, 16, 1, 2, (0x000A, 0x0102)), "11 10 0001 0002 04 000A 0102 C6F0"),
], ids=["fc3-unit1", "fc1", "fc3", "fc5", "fc6", "fc15", "fc16"])
def test_rtu_request_bytes(request_: Request, hexframe: str) -> None:
    assert rtu_adu(request_) == bytes.fromhex(hexframe.replace(" ", ""))


def test_tcp_request_bytes() -> None:
    assert tcp_adu(Request(1, 3, 0, 10), 0x1234) == bytes.fromhex("123400000006010300000" "00A")


@given(st.binary(max_size=300))
def test_crc_agrees_with_pymodbus(data: bytes) -> None:
    assert FramerRTU.compute_CRC(data).to_bytes(2, "big") == bytes((crc16(data) & 0xFF,
                                                                   crc16(data) >> 8))


def test_rtu_silence() -> None:
    assert rtu_silence(9600) == pytest.approx(3.5 * 11 / 9600)
    assert rtu_silence(115200) == 0.00175


# -- responses ----------------------------------------------------------------------------------

READ = Request(1, 3, 100, 2)


def test_response_whole_byte_by_byte_and_with_trailing_bytes() -> None:
    frame = registers_response(1, [0x1234, 0xABCD])
    for cut in range(len(frame)):
        assert scan_rtu(frame[:cut], READ).response is None
    scan = scan_rtu(frame + TRAILER, READ)
    assert scan.response is not None and scan.response.values == (0x1234, 0xABCD)
    assert scan.end == len(frame)  # DE AD BE EF stays unread
    assert (scan.stale, scan.noise, scan.corrupt) == (0, 0, False)


def test_frames_that_do_not_answer_are_stale() -> None:
    other_unit = registers_response(2, [1, 2])
    other_size = registers_response(1, [1, 2, 3])
    other_function = registers_response(1, [1, 2], function=4)
    good = registers_response(1, [7, 8])
    scan = scan_rtu(other_unit + other_size + other_function + good, READ)
    assert scan.response is not None and scan.response.values == (7, 8)
    assert scan.stale_units == [2, 1, 1]
    alone = scan_rtu(other_size, READ)
    assert alone.response is None and alone.stale == 1 and alone.resolved == len(other_size)


def test_noise_is_skipped_and_counted() -> None:
    good = registers_response(1, [7, 8])
    scan = scan_rtu(b"\x00\xff\x13" + good, READ)
    assert scan.response is not None and scan.noise == 3
    garbage = scan_rtu(bytes(range(40, 80)), READ)
    assert garbage.response is None and garbage.resolved == 0


def test_crc_error_is_never_a_response() -> None:
    frame = bytearray(registers_response(1, [0x1234, 0xABCD]))
    frame[4] ^= 0x01  # one flipped bit in the data
    scan = scan_rtu(bytes(frame), READ)
    assert scan.response is None and scan.corrupt


def test_exception_response() -> None:
    scan = scan_rtu(rtu(1, b"\x83\x02"), READ)
    assert scan.response is not None and scan.response.exception == 2
    assert "illegal data address" in scan.response.exception_name
    assert scan_rtu(rtu(1, b"\x84\x02"), READ).response is None  # exception of another function


def test_write_echoes_must_match() -> None:
    write = Request(1, 6, 1, 1, (3,))
    assert parse_pdu(write, 1, bytes.fromhex("0600010003")) is not None
    assert parse_pdu(write, 1, bytes.fromhex("0600010004")) is None
    multiple = Request(1, 16, 1, 2, (10, 258))
    assert parse_pdu(multiple, 1, bytes.fromhex("1000010002")) is not None
    assert parse_pdu(multiple, 1, bytes.fromhex("1000010003")) is None
    coils = Request(1, 1, 0, 10)
    response = parse_pdu(coils, 1, bytes.fromhex("0102CD01"))
    assert response is not None and response.values == (1, 0, 1, 1, 0, 0, 1, 1, 1, 0)


def test_tcp_transaction_ids() -> None:
    def mbap(tid: int, unit: int, pdu: bytes) -> bytes:
        return struct.pack(">HHHB", tid, 0, len(pdu) + 1, unit) + pdu

    answer = mbap(9, 1, bytes.fromhex("0304" "00070008"))
    late = mbap(8, 1, bytes.fromhex("0304" "00010002"))
    for cut in range(len(answer)):
        assert scan_tcp(answer[:cut], READ, 9).response is None
    scan = scan_tcp(late + answer + TRAILER, READ, 9)
    assert scan.response is not None and scan.response.values == (7, 8)
    assert scan.stale_units == [1] and scan.end == len(late + answer)
    wrong_shape = scan_tcp(mbap(9, 1, bytes.fromhex("0302" "0001")), READ, 9)
    assert wrong_shape.response is None and wrong_shape.corrupt
    desync = scan_tcp(b"\x00\x09\x00\x07\x00\x05\x01\x03\x02\x00\x01", READ, 9)
    assert desync.desync and desync.response is None
