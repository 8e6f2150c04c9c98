"""What every area's fields share: the model configuration, empty text as "off", comma-separated lists.

A value reaches an area as text from the environment (RELAY_SHELL_*), as a TOML value from the config file, or
already parsed (a test's keyword argument); the parsers accept all three.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator

if TYPE_CHECKING:
    from pydantic.json_schema import JsonDict

# extra="forbid": a key the file misspells is an error naming it (settings/load.py), never silently ignored.
# validate_default: the checks run on the defaults too. Defaults are written in their parsed form: an area no
# source sets is made without validation (settings/model.py). defer_build: an area is validated as part of
# Settings; its own validator (~0.5 ms each) is built only if something constructs the area alone.
AREA_CONFIG = ConfigDict(extra="forbid", validate_default=True, arbitrary_types_allowed=True, defer_build=True)


class Area(BaseModel):
    """What every area's model is: AREA_CONFIG, and no truth value read as a number or a number as a truth value.

    pydantic's lax mode takes `max_sessions = true` as 1, `audit_chain = 1` as true and `max_sessions = "7"` as 7:
    a TOML value has a type, and a file that writes the wrong one is a mistake to point out, not to guess at (the
    environment's text is still read as text: RELAY_SHELL_AUDIT_CHAIN=1 is true, RELAY_SHELL_MAX_SESSIONS=7 is 7)."""

    model_config = AREA_CONFIG

    @field_validator("*", mode="before")
    @classmethod
    def _truth_values_are_not_numbers(cls, raw: object, info: ValidationInfo) -> object:
        annotation = cls.model_fields[info.field_name or ""].annotation
        if annotation is bool and isinstance(raw, int | float) and not isinstance(raw, bool):
            raise ValueError(f"must be true or false, not the number {raw!r}")
        if annotation in (int, float) and isinstance(raw, bool):
            raise ValueError(f"must be a number, not {str(raw).lower()}")
        if isinstance(raw, FileText):
            if annotation in (int, float, bool):
                kinds: dict[object, str] = {int: "an integer", float: "a number", bool: "true or false"}
                kind = kinds[annotation]
                raise ValueError(f"must be {kind}, not a string (TOML: write it without quotes)")
            return str(raw)
        return raw


class FileText(str):
    """A string as the config file wrote it (settings/toml_file.py): a TOML string where a number or a truth value
    belongs is refused (`max_sessions = "7"`), while the environment's text is read as text."""

    __slots__ = ()


# In json_schema_extra: the value is where key or token material is kept; `relay-shell config show` masks it.
SECRET: JsonDict = {"secret": True}


def empty_is_none(raw: object) -> object:
    """An empty value turns an optional path setting off (RELAY_SHELL_RECORD_DIR= , record_dir = "")."""
    return None if raw == "" else raw


def existing_file(path: Path | None) -> Path | None:
    if path is not None and not path.expanduser().is_file():
        raise ValueError("is not a file")
    return path.expanduser() if path is not None else None


def comma_list(raw: object) -> object:
    """`a, b` (the environment) or ["a", "b"] (the file): the items, stripped, empty ones dropped."""
    if isinstance(raw, str):
        return tuple(item.strip() for item in raw.split(",") if item.strip())
    if isinstance(raw, list | tuple):
        items = [item.strip() if isinstance(item, str) else item for item in raw]
        return tuple(item for item in items if item != "")
    return raw


def text(raw: object) -> str:
    """The text of a setting that a parser reads; a TOML number or table where text belongs is refused."""
    if not isinstance(raw, str):
        raise ValueError(f"must be a string, not {type(raw).__name__}")
    return raw
