"""The `[sparkplug]` section: the gateway as a Sparkplug B edge node (pydantic v2, pure).

The edge node keeps its own MQTT session (the NDEATH must be the will of that session) to the
broker in `addresses`: the gateway's own listener when the Sparkplug host application connects
to the gateway, or the SCADA's broker (Ignition, HiveMQ, EMQX) directly. `tls` takes the same
table as an uplink remote's (`ca_file`, `cert_file`, `key_file`, `insecure`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from bridge.uplink.config import TlsConfig
from gateway.base.hostport import parse_host_port


def sparkplug_id(value: str) -> str:
    """A group, edge node or host id: one topic level, no separators or wildcards."""
    if not value or any(c in value for c in "/+#"):
        raise ValueError(f"{value!r}: must be non-empty without '/', '+' or '#'")
    return value


SparkplugId = Annotated[str, AfterValidator(sparkplug_id)]


class SparkplugConfig(BaseModel):
    """The `[sparkplug]` section."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = False
    group_id: SparkplugId = Field(default="outpost", description="Sparkplug group id")
    edge_node_id: SparkplugId | None = Field(
        default=None, description="Sparkplug edge node id; default: the gateway_id")
    addresses: list[str] = Field(
        default_factory=lambda: ["127.0.0.1:1883"],
        description="HOST:PORT of the MQTT server the host application uses, tried in order")
    protocol: Literal[4, 5] = Field(default=4, description="4 (MQTT 3.1.1) or 5")
    client_id: str | None = Field(default=None,
                                  description='default: "<group_id>-<edge_node_id>"')
    username: str | None = None
    password: str | None = None
    keepalive: Annotated[int, Field(ge=5, le=65535)] = 30
    tls: TlsConfig | None = Field(
        default=None, description="TLS towards the server, as for an uplink remote")
    primary_host: SparkplugId | None = Field(
        default=None, description="host id of the primary host application: births wait for "
        "its STATE online, data is held while it is offline")
    hold_max: Annotated[int, Field(ge=0)] = Field(
        default=100_000, description="values held while the primary host is offline "
        "(oldest dropped first)")
    dbirth_wait: Annotated[float, Field(ge=0)] = Field(
        default=2.0, description="seconds a device's DBIRTH waits for the values of the poll "
        "that brought it online (metrics still without one are born null)")
    backoff_initial: Annotated[float, Field(gt=0)] = 1.0
    backoff_max: Annotated[float, Field(gt=0)] = 30.0

    @field_validator("addresses")
    @classmethod
    def _check_addresses(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("needs at least one HOST:PORT")
        for address in value:
            parse_host_port(address)
        return value

    def node_id(self, gateway_id: str) -> str:
        """The edge node id: configured, else the gateway id."""
        return self.edge_node_id or gateway_id
