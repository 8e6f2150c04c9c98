"""Reading the config file (`--config FILE`, RELAY_SHELL_CONFIG) with pydantic-settings' TOML source: loaded only
when a file is given (settings/model.py merges it under the environment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict, TomlConfigSettingsSource


class FileLayout(BaseSettings):
    """How the file is read: no fields of its own, so every section comes back as written, and Settings, whose
    areas they must be, refuses one that is not (an error naming the nearest area)."""

    model_config = SettingsConfigDict(extra="allow")


def file_values(path: Path) -> dict[str, Any]:
    """The file's tables by section; tomllib's TOMLDecodeError (a ValueError naming line and column) for a file
    that is not TOML, OSError for one that cannot be read."""
    return TomlConfigSettingsSource(FileLayout, toml_file=path)()
