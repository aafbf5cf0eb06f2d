"""The bridge's BACnet codec against bacpypes3's (a second implementation): requests it encodes
decode in bacpypes3 as meant, answers bacpypes3 encodes decode here; the planner's sizes bound
real answers; the name tables still agree with bacpypes3's."""

from __future__ import annotations

import pytest

from bridge.bacnet import names, tags, wire
from bridge.bacnet.plan import plan_reads

bacpypes3 = pytest.importorskip("bacpypes3")
from bacpypes3.apdu import (  # noqa: E402
    APDU,
    ReadPropertyMultipleACK,
    ReadPropertyMultipleRequest,
    WritePropertyRequest,
)
from bacpypes3.basetypes import (  # noqa: E402
    EngineeringUnits,
    ErrorType,
    ReadAccessResult,
    ReadAccessResultElement,
    ReadAccessResultElementChoice,
    StatusFlags,
)
from bacpypes3.constructeddata import Any  # noqa: E402
from bacpypes3.pdu import PDU  # noqa: E402
from bacpypes3.primitivedata import ObjectIdentifier, Real, Unsigned  # noqa: E402


def _decoded(apdu: bytes) -> APDU:
    return APDU.decode(PDU(apdu))


def test_read_property_multiple_request_decodes_in_bacpypes3() -> None:
    data = wire.read_property_multiple([(0, 1, (85, 111, 117)), (19, 4194302, (85,))])
    request = ReadPropertyMultipleRequest.decode(_decoded(wire.confirmed(7, 14, data)))
    specs = request.listOfReadAccessSpecs
    assert [(int(s.objectIdentifier[0]), s.objectIdentifier[1]) for s in specs] == [
        (0, 1), (19, 4194302)]
    assert [int(r.propertyIdentifier) for r in specs[0].listOfPropertyReferences] == [85, 111,
                                                                                       117]


@pytest.mark.parametrize(("value", "kind"), [(tags.app_real(21.5), Real),
                                             (tags.app_unsigned(3), Unsigned)])
def test_write_property_decodes_in_bacpypes3(value: bytes, kind: type) -> None:
    data = wire.write_property(2, 1, 85, value, 8)
    request = WritePropertyRequest.decode(_decoded(wire.confirmed(1, 15, data)))
    assert (int(request.objectIdentifier[0]), request.objectIdentifier[1]) == (2, 1)
    assert request.priority == 8
    assert request.propertyValue.cast_out(kind) in (21.5, 3)


def test_a_bacpypes3_read_property_multiple_ack_decodes_and_fits_the_plan() -> None:
    results = []
    for i in range(50):
        elements = [
            ReadAccessResultElement(propertyIdentifier="present-value", readResult=(
                ReadAccessResultElementChoice(propertyValue=Any(Real(i + 0.5))))),
            ReadAccessResultElement(propertyIdentifier="status-flags", readResult=(
                ReadAccessResultElementChoice(propertyValue=Any(StatusFlags([0, 1, 0, 0]))))),
        ]
        if i == 7:
            elements[0] = ReadAccessResultElement(
                propertyIdentifier="present-value", readResult=ReadAccessResultElementChoice(
                    propertyAccessError=ErrorType(errorClass="object",
                                                  errorCode="unknown-object")))
        results.append(ReadAccessResult(objectIdentifier=ObjectIdentifier(("analog-value", i)),
                                        listOfResults=elements))
    ack = ReadPropertyMultipleACK(listOfReadAccessResults=results)
    ack.apduInvokeID = 3
    pdu = ack.encode()
    pdu.apduSeg = pdu.apduMor = False
    apdu = pdu.encode().pduData
    packet = wire.parse(wire.frame(bytes(apdu), wire.Route("127.0.0.1", 47808)))
    found = wire.parse_read_property_multiple(packet)
    assert found[0] == (2, 0, {85: 0.5, 111: [False, True, False, False]})
    assert found[7][2][85] == wire.PropertyError(1, 31)
    [read] = plan_reads([(2, i, (85, 111)) for i in range(50)], 1476)
    assert len(apdu) <= read.answer_bytes <= 1476


def test_name_tables_agree_with_bacpypes3() -> None:
    assert names.UNITS[62] == "degrees-celsius" and names.unit_text(62) == "°C"
    for number, name in names.UNITS.items():
        assert EngineeringUnits(number) == EngineeringUnits(name)


def test_junk_is_a_decode_error() -> None:
    for junk in (b"", b"garbage!", bytes([0x81, 0x0A, 0x00, 0x40, 1, 0, 0x30]),
                 bytes([0x81, 0x0A, 0x00, 0x07, 1, 0, 0x30])):
        with pytest.raises(tags.DecodeError):
            packet = wire.parse(junk)
            wire.parse_read_property_multiple(packet)
