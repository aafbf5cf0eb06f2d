"""Finding the nodes of points on a server: NodeIds and browse paths, DataTypes, fit.

`resolve` answers, for each point, its `Node` and the built-in type its value travels as, or
why the point cannot be served (browse path not found, node unknown, DataType that does not
fit the declared type). The DataTypes of all points come in one Read; only a DataType that is
not a built-in type (an enumeration, a subtype) costs a request of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asyncua import Client, Node, ua

from bridge.opcua import values
from bridge.opcua.config import OpcUaPointConfig


@dataclass(slots=True)
class Resolved:
    """A point's node on this server, or why there is none."""

    node: Node | None = None
    variant: ua.VariantType | None = None
    error: str | None = None


async def find_node(client: Client, text: str) -> Node:
    """A NodeId string (`ns=2;s=Tag`) or a browse path from Objects (`/2:PLC/2:Tag`);
    UaStatusCodeError (BadNoMatch, ...) or ValueError when there is no such node."""
    if text.startswith("/"):
        return await client.nodes.objects.get_child(text[1:].split("/"))
    return client.get_node(text)


async def variant_type(node: Node, datatype: Any) -> ua.VariantType:
    """The built-in type a node of DataType `datatype` travels as (enumerations as Int32)."""
    if isinstance(datatype, ua.NodeId) and datatype.NamespaceIndex == 0 \
            and isinstance(datatype.Identifier, int) and 1 <= datatype.Identifier <= 25:
        return ua.VariantType(datatype.Identifier)
    return await node.read_data_type_as_variant_type()


async def resolve(client: Client, points: list[OpcUaPointConfig]) -> list[Resolved]:
    """Each point's node and type, or its error."""
    found = [Resolved() for _ in points]
    for point, result in zip(points, found, strict=True):
        try:
            result.node = await find_node(client, point.node)
        except ua.UaStatusCodeError as exc:
            result.error = f"browse path not found ({ua.StatusCode(exc.code).name})"
        except (ValueError, ua.UaError) as exc:
            result.error = f"bad node id: {exc}"
    live = [(point, result, result.node) for point, result in zip(points, found, strict=True)
            if result.node is not None]
    answers = await client.read_attributes([node for _, _, node in live],
                                           ua.AttributeIds.DataType) if live else []
    for (point, result, node), answer in zip(live, answers, strict=True):
        status = answer.StatusCode or ua.StatusCode()
        if not status.is_good():
            result.error = (f"node {point.node} does not exist"
                            if status.value == ua.StatusCodes.BadNodeIdUnknown
                            else f"cannot read the node's DataType ({status.name})")
            continue
        result.variant = await variant_type(node, answer.Value.Value if answer.Value else None)
        result.error = values.check_type(point, result.variant)
    return found
