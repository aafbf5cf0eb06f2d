"""What every configuration section shares: a frozen model that refuses unknown keys, and the
error that lists every problem with its key path.

Errors teach: `format_errors` is given the model that was validated, finds the section each
error sits in, and adds what the user needs to fix it: the closest valid key for an unknown
key (`bridge.devices.0.order: Extra inputs are not permitted (did you mean byte_order?)`), and
the allowed values and meaning of a missing key (`address_base: Field required: one of 0, 1
(1 when the manual counts registers from 1)`).
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic.fields import FieldInfo


class Section(BaseModel):
    """A configuration section: unknown keys are errors, values are frozen after load, and
    every number is finite (TOML spells `inf` and `nan`, and `1e309` overflows to `inf`: no
    interval, scale, deadband or limit of ours means anything with them)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ConfigError(Exception):
    """The configuration is invalid; `errors` lists `key.path: message` lines."""

    def __init__(self, source: str, errors: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(errors))
        self.source = source
        self.errors = errors


def format_errors(exc: ValidationError, model: type[BaseModel] | None = None) -> list[str]:
    """`key.path: message` per error; with `model` (the validated model), messages that teach."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(part) for part in err["loc"]) or "(top level)"
        message = err["msg"]
        if err["type"] == "literal_error":
            message = f"{message} (got {err['input']!r})"
        section = _model_at(model, err["loc"][:-1]) if model is not None and err["loc"] else None
        if section is not None:
            key = str(err["loc"][-1])
            if err["type"] == "extra_forbidden":
                message += _closest_key(section, key)
            elif err["type"] == "missing" and key in section.model_fields:
                message += _allowed(section.model_fields[key])
        lines.append(f"{path}: {message}")
    return lines


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class at a location inside `model` (list indexes and dict keys are skipped)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue  # an element of a list: its model is the list's
        models = _models_in(current.model_fields[part].annotation) \
            if isinstance(current, type) and issubclass(current, BaseModel) \
            and part in current.model_fields else []
        if not models:
            return None
        current = models[0]
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds (`list[X]`, `X | None`, `Annotated[X, ...]`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += _models_in(arg)
    return found


def _closest_key(section: type[BaseModel], key: str) -> str:
    names = list(section.model_fields)
    close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]}?)"
    return f" (valid keys: {', '.join(names)})"


def _allowed(field: FieldInfo) -> str:
    values = _literal_values(field.annotation)
    text = f": one of {', '.join(repr(v) for v in values)}" if values else ""
    if field.description:
        text += f" ({field.description})"
    return text


def _literal_values(annotation: Any) -> list[object]:
    if typing.get_origin(annotation) is Literal:
        return list(typing.get_args(annotation))
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return [v for arg in typing.get_args(annotation) for v in _literal_values(arg)]
    return []
