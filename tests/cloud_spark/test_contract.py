"""cloud_spark/contract.py and docs/message-format.md say the same thing; layers hold."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from cloud_spark import contract as c
from cloud_spark.records import bronze_record, encode_record

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "message-format.md"
EXAMPLE = re.compile(r"<!-- example: (\w+) -->\s*```json\n(.*?)```", re.S)


def doc_examples() -> dict[str, object]:
    return {name: json.loads(body) for name, body in EXAMPLE.findall(DOC.read_text())}


def test_every_example_constant_is_in_the_doc_and_equal() -> None:
    examples = doc_examples()
    constants = {name for name in dir(c) if name.startswith("EXAMPLE_")}
    assert set(examples) == constants
    for name, value in examples.items():
        assert value == getattr(c, name), name


@pytest.mark.parametrize(
    ("example", "keys"),
    [
        ("EXAMPLE_USER_PROPERTIES", c.USER_PROPERTIES),
        ("EXAMPLE_ENVELOPE", c.ENVELOPE_KEYS),
        ("EXAMPLE_POINT", c.POINT_FIELDS),
        ("EXAMPLE_AGGREGATE", c.AGGREGATE_FIELDS),
        ("EXAMPLE_DEVICE_DIAGNOSTICS", c.DEVICE_DIAGNOSTICS_FIELDS),
        ("EXAMPLE_UPLINK_DIAGNOSTICS", c.UPLINK_DIAGNOSTICS_FIELDS),
        ("EXAMPLE_BRONZE", c.BRONZE_FIELDS),
    ],
)
def test_examples_use_exactly_the_contract_field_names(example: str, keys: tuple[str, ...]) -> None:
    assert list(doc_examples()[example]) == list(keys)  # type: ignore[call-overload]


def test_doc_names_every_field_topic_and_value() -> None:
    text = DOC.read_text()
    names = [
        *c.USER_PROPERTIES,
        *c.ENVELOPE_KEYS,
        *c.ENCODINGS,
        *c.POINT_FIELDS,
        *c.AGGREGATE_FIELDS,
        *c.QUALITIES,
        *c.STATUSES,
        *c.DEVICE_DIAGNOSTICS_FIELDS,
        *c.UPLINK_DIAGNOSTICS_FIELDS,
        *c.BRONZE_FIELDS,
        c.UPLINK_DIAGNOSTICS_TOPIC,
        c.DEFAULT_DEVICE_PREFIX,
        c.STATUS_LEAF,
        c.DIAGNOSTICS_LEAF,
    ]
    missing = [name for name in names if f"`{name}`" not in text]
    assert missing == []


def test_the_lander_turns_the_doc_examples_into_the_doc_bronze_record() -> None:
    """Both remote flavours of the documented message land as the documented record."""
    expected = c.EXAMPLE_BRONZE
    payload = c.EXAMPLE_ENVELOPE["payload"]
    assert isinstance(payload, str)
    common = {"remote_topic": expected["remote_topic"], "ingest_ms": expected["ingest_ms"]}
    v5 = bronze_record(
        payload=payload.encode(),
        user_properties=list(c.EXAMPLE_USER_PROPERTIES.items()),
        lander_id="lander-a",
        **common,  # type: ignore[arg-type]
    )
    v311 = bronze_record(
        payload=json.dumps(c.EXAMPLE_ENVELOPE).encode(),
        user_properties=None,
        lander_id="lander-a",
        **common,  # type: ignore[arg-type]
    )
    assert v5 == expected
    assert v311 == expected
    assert json.loads(encode_record(v5)) == expected
    assert json.loads(payload) == c.EXAMPLE_POINT


def test_cloud_spark_imports_nothing_from_the_gateway_side() -> None:
    forbidden = ("outpost", "gateway", "bridge", "storage", "bench")
    offenders = []
    for path in sorted((ROOT / "cloud_spark").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            offenders += [f"{path.name}: {m}" for m in modules if m.split(".")[0] in forbidden]
    assert offenders == []
