"""What every configuration section shares: a frozen model that refuses unknown keys, and the
error that lists every problem with its key path."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


class Section(BaseModel):
    """A configuration section: unknown keys are errors, values are frozen after load."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ConfigError(Exception):
    """The configuration is invalid; `errors` lists `key.path: message` lines."""

    def __init__(self, source: str, errors: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(errors))
        self.source = source
        self.errors = errors


def format_errors(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        path = ".".join(str(part) for part in err["loc"]) or "(top level)"
        message = err["msg"]
        if err["type"] == "literal_error":
            message = f"{message} (got {err['input']!r})"
        lines.append(f"{path}: {message}")
    return lines



