"""The device families as a tool sees them without naming one: the web console's view.

Every family of bridge/families.py `registered` becomes an `Entry`: its `kind`, the
`[bridge]` list its devices are in (`section`: `[[bridge.<section>]]`), the name people call
its devices by (`title`), its device configuration model and that model's JSON schema (with
the `x-ui` hints the model gives: labels, units, choices, which fields are shown at once and
which per point), its profiles when it has some, and its `explore` (probe, browse, discover)
when it has one. The device model is the item type of the section's list in `BridgeConfig`,
so a family that registers and adds its list there is complete: nothing here or in the
console names it.

Pure: reads the families' classes and the configuration models; no I/O.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

from bridge.config import BridgeConfig
from bridge.driver import Exploration, Family, explorer


@dataclass(frozen=True)
class Entry:
    """One family as the console shows it."""

    family: Family[Any, BridgeConfig]
    kind: str
    section: str
    title: str

    @property
    def model(self) -> type[BaseModel]:
        """The family's device configuration model."""
        return list_model(self.section)

    def schema(self) -> dict[str, Any]:
        """The model's JSON schema (pydantic's), with its `x-ui` hints."""
        return _schema(self.model)

    def devices(self, bridge: BridgeConfig) -> Sequence[Any]:
        """This family's devices in a bridge configuration."""
        return self.family.configs(bridge)

    def profiles(self) -> list[str]:
        """The device profiles the family ships (empty when it has none)."""
        profiles = getattr(self.family, "profiles", None)
        return list(profiles()) if callable(profiles) else []

    @property
    def can_explore(self) -> bool:
        """Whether the family can probe a device before it is saved."""
        return explorer(self.family) is not None

    async def explore(self, device: Any, bridge: BridgeConfig) -> Exploration:
        """The family's probe / browse / discover of one device (see `Explorer`)."""
        found = explorer(self.family)
        if found is None:
            raise NotImplementedError(f"the {self.kind} family has no probe")
        return await found.explore(device, bridge)


def entries(families: Sequence[Family[Any, BridgeConfig]]) -> list[Entry]:
    """The families (the running bridge's, or `registered`'s) as entries, in their order."""
    return [Entry(family, family.kind, str(getattr(family, "section", family.kind)),
                  str(getattr(family, "title", f"{family.kind} device")))
            for family in families]


def list_model(section: str) -> type[BaseModel]:
    """The model of the entries of `[[bridge.<section>]]` (KeyError: no such list)."""
    field = BridgeConfig.model_fields[section]
    args = typing.get_args(field.annotation)
    if not args or not isinstance(args[0], type) or not issubclass(args[0], BaseModel):
        raise KeyError(section)
    return args[0]


@cache
def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()
