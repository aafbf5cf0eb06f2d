"""The `[homeassistant]` section: MQTT discovery of the bridged points (pydantic v2, pure)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# Home Assistant takes node and object ids of letters, digits, '_' and '-' only.
DiscoveryId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+$")]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DeviceInfo(_Section):
    """What Home Assistant shows about one bridged device."""

    name: str = Field(description="the bridged device's name")
    manufacturer: str | None = None
    model: str | None = None


class HomeAssistantConfig(_Section):
    """The `[homeassistant]` section."""

    enabled: bool = False
    discovery_prefix: Annotated[str, Field(pattern=r"^[^/+#\s]+$")] = Field(
        default="homeassistant", description="Home Assistant's discovery prefix")
    node_id: DiscoveryId | None = Field(
        default=None, description="the gateway in discovery topics; default: the gateway_id "
        "with other characters replaced by '_'")
    status_topic: Annotated[str, Field(pattern=r"^[^+#]+$")] | None = Field(
        default=None, description="Home Assistant's birth / will topic (`online` / "
        "`offline`); default: <discovery_prefix>/status")
    devices: list[DeviceInfo] = Field(
        default_factory=list, description="manufacturer and model of bridged devices")

    def device(self, name: str) -> DeviceInfo:
        """What to show about the bridged device `name`."""
        return next((d for d in self.devices if d.name == name), DeviceInfo(name=name))
