"""`python -m cloud_spark.fleet config send`: sign a configuration for one gateway or every
gateway matching a pattern, publish it, and follow each one's result.

How this works: the gateways are found by their retained status on the cloud broker
(`<status prefix>/<gateway_id>`, `online` or `offline`), unless the pattern names a single
gateway. The configuration file is a template: `{gateway_id}` in it becomes each gateway's
id. It is the whole outpost.toml, or a named part of it (`devices`: the bridge's buses and
devices; `forward`: the uplink's forward rules), a fragment holding only those arrays of
tables that each gateway merges into its running file. Each gateway gets its own signed
document (it names the gateway, so it cannot be replayed on another) with the same version,
then the command waits for each gateway's retained `<status prefix>/<gateway_id>/config` to
report that version `applied`, `refused` or `rolled back`, and prints one line per gateway.
"""

from __future__ import annotations

import fnmatch
import json
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

from cloud_spark.fleet.broker import CloudSession
from cloud_spark.fleet.signing import WHOLE, load_signing_key, sign_config

FINAL = ("applied", "refused", "rolled back")
DEFAULT_STATUS_PREFIX = "outpost-status"
DEFAULT_COMMAND_TOPIC = "outpost-cmd/{gateway_id}/config"


@dataclass
class GatewayResult:
    """What became of the configuration on one gateway."""

    gateway_id: str
    version: int
    state: str = "no answer"
    reason: str = ""
    sent_at: float = 0.0  # time.monotonic()
    applying_s: float | None = None  # seconds from sent to "applying" seen
    finished_s: float | None = None  # seconds from sent to the final state seen

    def line(self) -> str:
        took = f" after {self.finished_s:.1f} s" if self.finished_s is not None else ""
        reason = f": {self.reason}" if self.reason else ""
        return f"{self.gateway_id}  version {self.version}  {self.state}{took}{reason}"


def find_gateways(session: CloudSession, pattern: str, status_prefix: str,
                  settle: float = 2.0) -> list[str]:
    """The gateway ids matching `pattern` (fnmatch: `plant-*`) that have a status topic."""
    if not any(ch in pattern for ch in "*?["):
        return [pattern]
    session.subscribe(f"{status_prefix}/+")
    # Retained statuses arrive right after the subscription: wait until they stop coming.
    seen = -1
    end = time.monotonic() + settle * 5
    while time.monotonic() < end and len(session.latest) != seen:
        seen = len(session.latest)
        time.sleep(settle)
    names = {topic.split("/")[-1] for topic in session.latest
             if topic.startswith(status_prefix + "/") and topic.count("/") ==
             status_prefix.count("/") + 1}
    return sorted(name for name in names if fnmatch.fnmatchcase(name, pattern))


def part_problem(template: str, part: str, remove_all: bool) -> str | None:
    """Why a part's fragment should not be sent as it is, or None. An empty fragment removes
    every device (or forward rule) of the gateways: it is sent only with `remove_all`."""
    if part == WHOLE:
        return None
    try:
        empty = not tomllib.loads(template.replace("{gateway_id}", "gateway"))
    except tomllib.TOMLDecodeError as exc:
        return f"not valid TOML: {exc}"
    if empty and not remove_all:
        return (f"holds no table: as part {part!r} it would remove every one of them on "
                "the gateways; add --remove-all if that is what you mean")
    if remove_all and not empty:
        return "--remove-all sends an empty part, but the file holds tables"
    return None


def send_config(session: CloudSession, gateways: list[str], template: str, key_file: Path,
                version: int, request_id: str, timeout: float,
                status_prefix: str = DEFAULT_STATUS_PREFIX,
                command_topic: str = DEFAULT_COMMAND_TOPIC,
                part: str = WHOLE) -> list[GatewayResult]:
    """Sign and publish the configuration (the whole file, or the fragment of `part`) for each
    gateway; wait for the results."""
    key = load_signing_key(key_file)
    key_id = key_file.name.removesuffix(".key")
    results = {g: GatewayResult(g, version) for g in gateways}
    topics = [f"{status_prefix}/{g}/config" for g in gateways]
    session.subscribe(*topics)
    session.forget(topics)
    for gateway in gateways:
        payload = sign_config(key, key_id, gateway, version, request_id,
                              template.replace("{gateway_id}", gateway), part)
        results[gateway].sent_at = time.monotonic()
        session.publish(command_topic.format(gateway_id=gateway), payload)

    def settled(latest: dict[str, bytes]) -> bool:
        now = time.monotonic()
        for gateway, result in results.items():
            report = _report(latest.get(f"{status_prefix}/{gateway}/config"))
            if report.get("version") != version or result.finished_s is not None:
                continue
            state = str(report.get("state"))
            if state == "applying" and result.applying_s is None:
                result.applying_s = now - result.sent_at
            if state in FINAL:
                result.state, result.reason = state, str(report.get("reason") or "")
                result.finished_s = now - result.sent_at
        return all(r.finished_s is not None for r in results.values())

    session.wait(settled, timeout, fresh=True)
    return [results[g] for g in gateways]


def _report(payload: bytes | None) -> dict[str, object]:
    if not payload:
        return {}
    try:
        value = json.loads(payload)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
