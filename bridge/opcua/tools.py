"""`outpost opcua browse|probe`: find node ids, and check a server before configuring it.

- `browse` lists the nodes below a node (default: the Objects folder), `--depth` levels deep:
  NodeId, BrowseName (the step of a browse path), node class, and for variables the DataType
  and current value, so the lines can be copied into `[[bridge.opcua.points]]`.
- `probe` asks the server for its endpoints (always allowed without security) and prints
  them with their security policies, modes and user identities, and the server certificate
  (thumbprint, subject, validity; `--save-certificate` writes it for `trusted_certificates`);
  with `--config FILE --device NAME` it then opens a session as that device would and reads
  every point once, one line per point: value, quality and source time, or why it fails.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from asyncua import Client, Node, ua
from cryptography import x509

from bridge.opcua import values
from bridge.opcua.config import OpcUaDeviceConfig
from bridge.opcua.connect import close_quietly, first_certificate, make_client, open_client
from bridge.opcua.nodes import find_node, resolve
from bridge.opcua.pki import Pki, fingerprint

_TOKENS = {ua.UserTokenType.Anonymous: "anonymous", ua.UserTokenType.UserName: "username",
           ua.UserTokenType.Certificate: "certificate",
           ua.UserTokenType.IssuedToken: "issued-token"}


async def probe(config: OpcUaDeviceConfig, pki: Pki | None,
                save_certificate: Path | None = None) -> tuple[list[str], int]:
    """The server's endpoints and certificate, then every point of `config` read once;
    (lines, number of points that failed)."""
    endpoints = await make_client(config).connect_and_get_server_endpoints()
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
    der = next((first_certificate(e.ServerCertificate) for e in endpoints
                if e.ServerCertificate), b"")
    if der:
        certificate = x509.load_der_x509_certificate(der)
        expired = certificate.not_valid_after_utc < datetime.datetime.now(datetime.UTC)
        lines.append(f"server certificate {fingerprint(certificate)} "
                     f"{certificate.subject.rfc4514_string()}, valid "
                     f"{certificate.not_valid_before_utc:%Y-%m-%d} to "
                     f"{certificate.not_valid_after_utc:%Y-%m-%d}"
                     + (" (EXPIRED)" if expired else ""))
        if save_certificate is not None:
            save_certificate.write_bytes(der)
            lines.append(f"saved to {save_certificate} (add it to trusted_certificates)")
    if not config.points:
        return lines, 0
    client = await open_client(config, pki)
    try:
        found = await resolve(client, list(config.points))
        nodes = [f.node for f in found if f.node is not None and f.error is None]
        answers = iter(await client.read_attributes(nodes) if nodes else [])
        lines.append("")
        lines.append(f"{'point':<24} {'node':<32} result")
        failed = 0
        for point, result in zip(config.points, found, strict=True):
            where = f"{point.name:<24} {point.node:<32} "
            if result.node is None or result.error is not None:
                failed += 1
                lines.append(where + f"FAILED: {result.error}")
                continue
            data = next(answers)
            value, quality = values.point_value(point, data)
            stamp = values.timestamp_ms(data, 0)
            when = (datetime.datetime.fromtimestamp(stamp / 1000, datetime.UTC)
                    .isoformat(timespec="milliseconds").replace("+00:00", "Z")) if stamp else "-"
            unit = f" {point.unit}" if point.unit else ""
            lines.append(where + f"{value!r}{unit} ({quality}, "
                         f"{values.type_name(result.variant or ua.VariantType.Null)}, {when})")
        lines.append(f"{len(config.points) - failed} of {len(config.points)} point(s) "
                     f"answered, {failed} failed")
        return lines, failed
    finally:
        await close_quietly(client)


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
