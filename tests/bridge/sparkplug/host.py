"""A Sparkplug B host application for the tests: paho-mqtt + the same generated protobuf code.

It subscribes to everything under `spBv1.0/#` at a real mosquitto, decodes every payload with
`sparkplug_b_pb2.Payload`, and answers questions a SCADA would ask: the births, the DATA of a
device by metric name (resolved through the aliases of the last DBIRTH), the seq sequence. It
can send NCMD / DCMD and publish its own STATE like a primary host application.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bridge.sparkplug.sparkplug_b_pb2 import Payload
from tests.gateway.broker.e2e.helpers import PahoClient, wait_for
from tests.support.mosquitto import Mosquitto

# The Sparkplug B datatypes by the names of the specification's table (sparkplug_b.proto lists
# them in a comment of `Payload`).
DATATYPES = {1: "Int8", 2: "Int16", 3: "Int32", 4: "Int64", 5: "UInt8", 6: "UInt16",
             7: "UInt32", 8: "UInt64", 9: "Float", 10: "Double", 11: "Boolean", 12: "String",
             13: "DateTime", 14: "Text"}


@dataclass(frozen=True)
class BirthMetric:
    """One metric of a DBIRTH as a host reads it: datatype, value and engineering unit."""

    datatype: str
    value: Any
    unit: str | None


def metric_value(metric: Payload.Metric) -> Any:
    """The value of a metric (None when it is null)."""
    field = metric.WhichOneof("value")
    return None if metric.is_null or field is None else getattr(metric, field)


@dataclass
class Seen:
    """One Sparkplug message as the host decoded it."""

    topic: str
    kind: str  # NBIRTH, DBIRTH, DDATA, ...
    device: str | None
    payload: Payload


class SparkplugHost(PahoClient):
    """A host application at a mosquitto."""

    def __init__(self, broker: Mosquitto, host_id: str = "scada") -> None:
        super().__init__(broker, client_id=f"host-{host_id}-{time.monotonic_ns()}")  # type: ignore[arg-type]
        self.host_id = host_id
        self.connect()
        self.subscribe("spBv1.0/#", 1)

    def seen(self) -> list[Seen]:
        """Every message the edge node published, decoded, in arrival order."""
        out = []
        for message in self.messages:
            parts = message.topic.split("/")
            if len(parts) < 4 or parts[1] == "STATE" or parts[2] in ("NCMD", "DCMD"):
                continue
            out.append(Seen(message.topic, parts[2], parts[4] if len(parts) > 4 else None,
                            Payload.FromString(message.payload)))
        return out

    def of(self, kind: str, device: str | None = None) -> list[Seen]:
        return [s for s in self.seen() if s.kind == kind and (device is None or s.device == device)]

    def wait_count(self, kind: str, count: int, device: str | None = None,
                   timeout: float = 15.0) -> list[Seen]:
        return wait_for(lambda: len(found := self.of(kind, device)) >= count and found,
                        timeout, message=f"{kind} {device}: {len(self.of(kind, device))} seen, "
                        f"{count} expected")

    def aliases(self, device: str) -> dict[int, str]:
        """Alias -> metric name from the last DBIRTH of `device`."""
        birth = self.of("DBIRTH", device)[-1].payload
        return {m.alias: m.name for m in birth.metrics}

    def values(self, device: str) -> list[tuple[str, Any, bool]]:
        """(metric name, value, is_historical) of every DATA metric of `device`, in order."""
        names = self.aliases(device)
        out = []
        for seen in self.of("DDATA", device):
            for metric in seen.payload.metrics:
                out.append((names[metric.alias], metric_value(metric), metric.is_historical))
        return out

    def birth_metrics(self, device: str) -> dict[str, BirthMetric]:
        """Metric name -> what the last DBIRTH of `device` says of it."""
        out = {}
        for metric in self.of("DBIRTH", device)[-1].payload.metrics:
            properties = dict(zip(metric.properties.keys, metric.properties.values, strict=True))
            unit = properties["engUnit"].string_value if "engUnit" in properties else None
            out[metric.name] = BirthMetric(DATATYPES.get(metric.datatype, str(metric.datatype)),
                                           metric_value(metric), unit)
        return out

    def wait_value(self, device: str, name: str, predicate: Callable[[Any], bool],
                   timeout: float = 15.0) -> tuple[str, Any, bool]:
        def check() -> tuple[str, Any, bool] | None:
            if not self.of("DBIRTH", device):
                return None
            return next((v for v in self.values(device) if v[0] == name and predicate(v[1])),
                        None)

        return wait_for(check, timeout, message=f"{device}/{name}: no matching DDATA")

    def command(self, group: str, node: str, device: str | None, payload: Payload | bytes,
                ) -> None:
        """Send an NCMD (device None) or a DCMD."""
        data = payload if isinstance(payload, bytes) else payload.SerializeToString()
        if device is None:
            self.publish(f"spBv1.0/{group}/NCMD/{node}", data, 0)
        else:
            self.publish(f"spBv1.0/{group}/DCMD/{node}/{device}", data, 0)

    def announce(self, online: bool) -> None:
        """Publish this host's STATE (retained, QoS 1) as Sparkplug 3.0 specifies."""
        body = json.dumps({"online": online, "timestamp": int(time.time() * 1000)})
        self.publish(f"spBv1.0/STATE/{self.host_id}", body.encode(), 1, retain=True)


def rebirth_request() -> Payload:
    payload = Payload(timestamp=int(time.time() * 1000))
    payload.metrics.add(name="Node Control/Rebirth", datatype=11, boolean_value=True)
    return payload


def metric_command(name: str, datatype: int, **value: Any) -> Payload:
    payload = Payload(timestamp=int(time.time() * 1000))
    payload.metrics.add(name=name, datatype=datatype, **value)
    return payload
