"""`outpost opcua browse|probe`: find node ids, and check a server before configuring it.

- `browse` lists the nodes below a node (default: the Objects folder), `--depth` levels deep:
  NodeId, BrowseName (the step of a browse path), node class, and for variables the DataType
  and current value, so the lines can be copied into `[[bridge.opcua.points]]`.
- `probe` asks the server for its endpoints (always allowed without security) and prints
  them with their security policies, modes and user identities, and the server certificate
  (thumbprint, subject, validity; `--save-certificate` writes it for `trusted_certificates`);
  with `--config FILE --device NAME` it then opens a session as that device would and reads
  every point once, one line per point: value, quality and source time, or why it fails.
- `explore` is both for the console (`OpcUaFamily.explore`): the endpoints, every point read
  once, and the variables below the Objects folder, each with the point row that reads it.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

from asyncua import Client, Node, ua
from cryptography import x509

from bridge.driver import Exploration, Found
from bridge.opcua import values
from bridge.opcua.config import OpcUaDeviceConfig
from bridge.opcua.connect import close_quietly, first_certificate, make_client, open_client
from bridge.opcua.nodes import find_node, resolve
from bridge.opcua.pki import Pki, fingerprint
from bridge.point import RESERVED_LEAVES

_TOKENS = {ua.UserTokenType.Anonymous: "anonymous", ua.UserTokenType.UserName: "username",
           ua.UserTokenType.Certificate: "certificate",
           ua.UserTokenType.IssuedToken: "issued-token"}
EXPLORE_DEPTH = 3  # levels below the Objects folder the console's browse descends
EXPLORE_LIMIT = 64  # variables it lists at most (a form holds 64 point rows)


async def probe(config: OpcUaDeviceConfig, pki: Pki | None,
                save_certificate: Path | None = None) -> tuple[list[str], int]:
    """The server's endpoints and certificate, then every point of `config` read once;
    (lines, number of points that failed)."""
    endpoints = await make_client(config).connect_and_get_server_endpoints()
    lines = _endpoint_lines(endpoints)
    der = _server_certificate(endpoints)
    if der and save_certificate is not None:
        save_certificate.write_bytes(der)
        lines.append(f"saved to {save_certificate} (add it to trusted_certificates)")
    if not config.points:
        return lines, 0
    client = await open_client(config, pki)
    try:
        rows = await _read_points(client, config)
    finally:
        await close_quietly(client)
    lines.append("")
    lines.append(f"{'point':<24} {'node':<32} result")
    failed = 0
    for row in rows:
        where = f"{row.name:<24} {row.where:<32} "
        if row.error is not None:
            failed += 1
            lines.append(where + f"FAILED: {row.error}")
            continue
        unit = f" {row.unit}" if row.unit else ""
        lines.append(where + f"{row.value!r}{unit} ({row.quality}, {row.detail})")
    lines.append(f"{len(config.points) - failed} of {len(config.points)} point(s) "
                 f"answered, {failed} failed")
    return lines, failed


async def explore(config: OpcUaDeviceConfig, pki: Pki | None) -> Exploration:
    """The console's probe and browse at once: the server's endpoints, every point of `config`
    read once, and the variables below the Objects folder (the server's own namespace 0
    left out; `EXPLORE_DEPTH` levels, at most `EXPLORE_LIMIT`), each with the point that
    would read it."""
    endpoints = await make_client(config).connect_and_get_server_endpoints()
    client = await open_client(config, pki)
    try:
        rows = await _read_points(client, config) if config.points else []
        found: list[Found] = []
        await _variables(client, client.nodes.objects, 0, found)
    finally:
        await close_quietly(client)
    return Exploration(tuple(_endpoint_lines(endpoints)), tuple(rows), tuple(found))


def _server_certificate(endpoints: list[ua.EndpointDescription]) -> bytes:
    return next((first_certificate(e.ServerCertificate) for e in endpoints
                 if e.ServerCertificate), b"")


def _endpoint_lines(endpoints: list[ua.EndpointDescription]) -> list[str]:
    """The server, its endpoints (policy, mode, user identities) and its certificate."""
    lines = []
    if endpoints:
        server = endpoints[0].Server
        lines.append(f"server {server.ApplicationName.Text} ({server.ApplicationUri})")
    lines.append(f"{'security policy':<24} {'mode':<15} user identities")
    for endpoint in endpoints:
        tokens = ", ".join(dict.fromkeys(_TOKENS.get(t.TokenType, str(t.TokenType))
                                         for t in endpoint.UserIdentityTokens or []))
        lines.append(f"{endpoint.SecurityPolicyUri.rsplit('#', 1)[-1]:<24} "
                     f"{endpoint.SecurityMode.name.rstrip('_'):<15} {tokens}")
    der = _server_certificate(endpoints)
    if der:
        certificate = x509.load_der_x509_certificate(der)
        expired = certificate.not_valid_after_utc < datetime.datetime.now(datetime.UTC)
        lines.append(f"server certificate {fingerprint(certificate)} "
                     f"{certificate.subject.rfc4514_string()}, valid "
                     f"{certificate.not_valid_before_utc:%Y-%m-%d} to "
                     f"{certificate.not_valid_after_utc:%Y-%m-%d}"
                     + (" (EXPIRED)" if expired else ""))
    return lines


async def _read_points(client: Client, config: OpcUaDeviceConfig) -> list[Found]:
    """Every point read once: its value, or why it has none (detail: type, source time)."""
    found = await resolve(client, list(config.points))
    nodes = [f.node for f in found if f.node is not None and f.error is None]
    answers = iter(await client.read_attributes(nodes) if nodes else [])
    rows = []
    for point, result in zip(config.points, found, strict=True):
        if result.node is None or result.error is not None:
            rows.append(Found(point.name, point.node, error=str(result.error)))
            continue
        data = next(answers)
        value, quality = values.point_value(point, data)
        stamp = values.timestamp_ms(data, 0)
        when = (datetime.datetime.fromtimestamp(stamp / 1000, datetime.UTC)
                .isoformat(timespec="milliseconds").replace("+00:00", "Z")) if stamp else "-"
        kind = values.type_name(result.variant or ua.VariantType.Null)
        rows.append(Found(point.name, point.node, value, point.unit, quality, None,
                          f"{kind}, {when}"))
    return rows


def _point_name(text: str, taken: set[str]) -> str:
    """A point name (one topic level, unique) made from a browse name."""
    name = re.sub(r"[/+#\s]+", "_", text).lstrip("$")[:56] or "node"
    unique, n = name, 2
    while unique in taken or unique in RESERVED_LEAVES:
        unique, n = f"{name}_{n}", n + 1
    taken.add(unique)
    return unique


async def _variables(client: Client, node: Node, level: int, out: list[Found]) -> None:
    """The variables below `node` (objects of namespace 0, the server's own, left out)."""
    taken = {f.name for f in out}
    for ref in await node.get_children_descriptions():
        if len(out) >= EXPLORE_LIMIT:
            return
        child = client.get_node(ref.NodeId)
        if ref.NodeClass == ua.NodeClass.Object:
            if ref.NodeId.NamespaceIndex != 0 and level + 1 < EXPLORE_DEPTH:
                await _variables(client, child, level + 1, out)
            continue
        if ref.NodeClass != ua.NodeClass.Variable:
            continue
        node_id = ref.NodeId.to_string()
        point: dict[str, object] = {"name": _point_name(ref.BrowseName.Name, taken),
                                    "node": node_id}
        try:
            data = await child.read_data_value(raise_on_bad_status=False)
            variant = await child.read_data_type_as_variant_type()
        except ua.UaError as exc:
            out.append(Found(str(point["name"]), node_id, error=str(exc), point=point))
            continue
        value = values.to_json(data.Value.Value) if data.Value is not None else None
        kind = values.type_name(variant)
        if isinstance(value, list | dict):
            point["type"] = "json"
        elif kind in values.VARIANT_TYPES:
            point["type"] = kind
        out.append(Found(str(point["name"]), node_id, value, None,
                         values.quality(data.StatusCode), None, kind, point))


async def browse(config: OpcUaDeviceConfig, pki: Pki | None, start: str | None,
                 depth: int) -> list[str]:
    """The nodes below `start` (default Objects), `depth` levels, one line each."""
    client = await open_client(config, pki)
    try:
        node = await find_node(client, start) if start else client.nodes.objects
        lines = [f"{'node id':<40} {'browse name':<28} {'class':<9} type / value"]
        await _browse(client, node, depth, 0, lines)
        return lines
    finally:
        await close_quietly(client)


async def _browse(client: Client, node: Node, depth: int, level: int,
                  lines: list[str]) -> None:
    for ref in await node.get_children_descriptions():
        child = client.get_node(ref.NodeId)
        name = f"{ref.BrowseName.NamespaceIndex}:{ref.BrowseName.Name}"
        detail = ""
        if ref.NodeClass == ua.NodeClass.Variable:
            try:
                data = await child.read_data_value(raise_on_bad_status=False)
                variant = await child.read_data_type_as_variant_type()
                shown = values.to_json(data.Value.Value) if data.Value is not None else None
                text = repr(shown)
                detail = f"{values.type_name(variant)} = " + (
                    text if len(text) <= 40 else text[:37] + "...")
            except ua.UaError as exc:
                detail = f"({exc})"
        lines.append(f"{'  ' * level + ref.NodeId.to_string():<40} "
                     f"{'  ' * level + name:<28} {ref.NodeClass.name:<9} {detail}".rstrip())
        if level + 1 < depth and ref.NodeClass == ua.NodeClass.Object:
            await _browse(client, child, depth, level + 1, lines)
