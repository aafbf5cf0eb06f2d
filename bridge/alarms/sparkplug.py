"""The alarms as Sparkplug B node metrics (pure): `Alarms/<name>/Active` and
`Alarms/<name>/Acked` (Boolean) and `Alarms/<name>/State` (String: normal, active_unacked,
...), born in the NBIRTH and sent as NDATA when an alarm's state changes (bridge/sparkplug/
node.py, `EdgeNode.alarm`). The edge node imports this module, never the other way round."""

from __future__ import annotations

from typing import Any

from bridge.alarms.machine import AlarmView

__all__ = ["AlarmView", "add_alarm_metrics"]

BOOLEAN, STRING = 11, 12  # Sparkplug B datatypes (bridge/sparkplug/payload.py has them all)


def add_alarm_metrics(payload: Any, alarm: AlarmView) -> None:
    """The alarm's three metrics, at its state's time (`payload`: a Sparkplug `Payload`)."""
    base = f"Alarms/{alarm.name}"
    payload.metrics.add(name=f"{base}/Active", datatype=BOOLEAN, boolean_value=alarm.active,
                        timestamp=alarm.ts_ms)
    payload.metrics.add(name=f"{base}/Acked", datatype=BOOLEAN, boolean_value=alarm.acked,
                        timestamp=alarm.ts_ms)
    payload.metrics.add(name=f"{base}/State", datatype=STRING, string_value=alarm.state,
                        timestamp=alarm.ts_ms)
