"""Reading the config file (`--config FILE`, RELAY_SHELL_CONFIG) with pydantic-settings' TOML source: loaded only
when a file is given (settings/model.py merges it under the environment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict, TomlConfigSettingsSource

from relay_shell.settings.values import FileText


class FileLayout(BaseSettings):
    """How the file is read: no fields of its own, so every section comes back as written, and Settings, whose
    areas they must be, refuses one that is not (an error naming the nearest area)."""

    model_config = SettingsConfigDict(extra="allow")


def file_values(path: Path) -> dict[str, Any]:
    """The file's tables by section, each string a FileText (a string where a number belongs is an error, not
    read as the number); tomllib's TOMLDecodeError (a ValueError naming line and column) for a file that is not
    TOML, OSError for one that cannot be read."""
    tables = TomlConfigSettingsSource(FileLayout, toml_file=path)()
    return {
        section: {key: FileText(value) if isinstance(value, str) else value for key, value in table.items()}
        if isinstance(table, dict)
        else table
        for section, table in tables.items()
    }
