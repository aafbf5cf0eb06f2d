"""`outpost enip probe|browse`: check a controller before configuring it, and find tag names.

- `probe` connects as the device would (route, connection size), prints the controller's
  product name, the connection size it granted and the read plan for it (each Multiple
  Service Packet with the tags it reads: bridge/enip/plan.py), then reads every point once
  with that plan and prints one line per point: its value and unit, or why it fails (no such
  tag, another data type than configured).
- `browse` asks the controller for its tag list (Get Instance Attribute List on the Symbol
  object: controller scope, then each program's), one line per tag: the name to put in
  `tag = ...`, its data type and array dimensions. Structure (UDT) tags are listed by name;
  their members are `Tag.Member`.
- `explore` is both for the console, as rows: the points read once, and the tags found, each
  with the point row that reads it.
"""

from __future__ import annotations

import logging
import re

from bridge.driver import Exploration, Found
from bridge.enip import wire
from bridge.enip.config import EnipDeviceConfig
from bridge.enip.device import EnipDevice
from bridge.enip.plan import describe
from bridge.enip.session import Session, open_session
from bridge.enip.values import TYPE_NAMES
from bridge.probe import ProbeRun, point_lines


async def explore(config: EnipDeviceConfig) -> Exploration:
    """The connection (the connection size granted), the read plan, every point read once
    with it, and the controller's tags where it lists them (`EnipFamily.explore`, the
    console's probe and browse: each tag found comes with the point row that reads it)."""
    logging.getLogger("outpost.bridge.enip").setLevel(logging.CRITICAL)  # the rows say it
    run = ProbeRun()
    device = EnipDevice(config, run.context)
    session = await open_session(config)
    try:
        lines = [f"connected to {config.route} ({session.product}), connection size "
                 f"{session.connection_size} bytes"]
        if config.points:
            device.replan(session.connection_size)
            await device.poll(session)
            lines.append(f"plan: {len(device.plan)} request(s) per poll for "
                         f"{len(config.points)} point(s)")
            lines += describe(device.plan, session.connection_size)
        try:
            tags = await all_tags(session)
        except RuntimeError as exc:  # a controller (or simulator) that keeps no tag list
            lines.append(str(exc))
            tags = []
    finally:
        await session.close()
    rows = run.rows(device.points.values(), lambda point: point.tag,
                    lambda point: point.type)
    found = tuple(Found(_point_name(tag), tag, detail=kind + (f"[{dimensions} dim]"
                                                              if dimensions else ""),
                        point={"name": _point_name(tag), "tag": tag, "type": kind}
                        if kind in TYPE_NAMES and not dimensions else None)
                  for tag, kind, dimensions in tags)
    return Exploration(tuple(lines), rows, found)


def _point_name(tag: str) -> str:
    """A point name suggested for a tag: `Program:Main.Count` -> `main_count`."""
    text = tag.removeprefix("Program:").replace(".", "_").replace("[", "_").replace("]", "")
    return re.sub(r"[^a-z0-9_]+", "_", text.lower()).strip("_") or "tag"


async def probe(config: EnipDeviceConfig) -> tuple[list[str], int]:
    """The connection, the plan and every point read once; (lines, points that failed)."""
    exploration = await explore(config)
    lines = [line for line in exploration.lines if "does not list its tags" not in line]
    points, failed = point_lines(exploration.points, (("point", 24), ("tag", 28), ("type", 8)),
                                 _shown)
    return [*lines, *points], failed


async def tag_list(session: Session, program: str | None = None,
                   ) -> list[tuple[str, str, int]]:
    """(name, type, array dimensions) of every tag of the controller or of one program,
    system tags left out; RuntimeError when the controller does not list them."""
    tags: list[tuple[str, str, int]] = []
    after = 0
    while True:
        request = wire.list_tags(after, program)
        try:
            reply = (await session.exchange([request]))[0]
        except wire.ProtocolError as exc:
            raise RuntimeError(f"the controller does not list its tags ({exc})") from None
        if reply.status not in (0, 0x06):
            raise RuntimeError(f"the controller does not list its tags: {reply.reason()}")
        entries = wire.parse_tag_list(reply.data)
        for instance, name, symbol in entries:
            kind, dimensions, system = wire.symbol_type(symbol)
            after = max(after, instance + 1)
            if not system and not name.startswith("__"):
                tags.append((name, kind, dimensions))
        if reply.status == 0 or not entries:
            return tags


def _shown(value: object) -> str:
    """A value as a probe line shows it: a long array by its first elements and its length."""
    if isinstance(value, list) and len(value) > 8:
        return f"[{', '.join(map(repr, value[:4]))}, ... ({len(value)} elements)]"
    return repr(value)


async def all_tags(session: Session) -> list[tuple[str, str, int]]:
    """(name, type, array dimensions) of every tag of the controller, then of each program
    (`Program:<name>.<tag>`); RuntimeError when the controller does not list them."""
    controller = await tag_list(session)
    tags = [tag for tag in controller if not tag[0].startswith("Program:")]
    for program in (name for name, _, _ in controller if name.startswith("Program:")):
        tags += [(f"{program}.{name}", kind, dimensions)
                 for name, kind, dimensions in await tag_list(session, program)]
    return tags


async def browse(config: EnipDeviceConfig) -> list[str]:
    """Every tag of the controller and of its programs, one line each."""
    session = await open_session(config)
    try:
        tags = await all_tags(session)
    finally:
        await session.close()
    return [f"{'tag':<40} {'type':<20} dimensions",
            *(f"{name:<40} {kind:<20} {dimensions or ''}".rstrip()
              for name, kind, dimensions in tags)]
