"""The settings: one typed area per concern, filled from (highest first) keyword arguments, the RELAY_SHELL_*
environment, the config file (settings/file.py), and the defaults.

A setting keeps the name it had before the areas: RELAY_SHELL_MAX_SESSIONS is `max_sessions` in `[sessions]` of
the file and `settings.sessions.max_sessions` in the code, so no table maps one spelling to another.

Settings is a plain pydantic model that gathers its sources itself, area by area: pydantic-settings reads the
config file (settings/toml_file.py) and is loaded only when there is one. Its BaseSettings, only to merge the
keyword arguments over our own environment source, cost every start ~9 ms and ~2 MiB of memory for loading
pydantic-settings and the providers it imports (dotenv, the cloud secret stores, its command-line parser).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.fields import FieldInfo

from relay_shell.settings.audit import AuditSettings
from relay_shell.settings.auth import AuthSettings
from relay_shell.settings.file import config_file_path
from relay_shell.settings.http import HttpSettings
from relay_shell.settings.jobs import JobSettings
from relay_shell.settings.limits import LimitSettings
from relay_shell.settings.metrics import MetricsSettings
from relay_shell.settings.offhost import OffHostSettings
from relay_shell.settings.policy import PolicySettings
from relay_shell.settings.runbooks import RunbookSettings
from relay_shell.settings.sessions import SessionSettings
from relay_shell.settings.ssh import SshSettings
from relay_shell.settings.trace import TraceSettings

ENV_PREFIX = "RELAY_SHELL_"


class Settings(BaseModel):
    # extra="forbid": a section the file misspells is an error naming it.
    model_config = ConfigDict(extra="forbid", validate_default=True)

    # An area no source sets holds its defaults, which are written in their parsed form: made without validation,
    # so the area's own validator is not built at every start (its schema is part of this one's; values.py
    # defer_build). Whatever a source sets is validated here.
    http: HttpSettings = Field(default_factory=HttpSettings.model_construct)
    auth: AuthSettings = Field(default_factory=AuthSettings.model_construct)
    audit: AuditSettings = Field(default_factory=AuditSettings.model_construct)
    offhost: OffHostSettings = Field(default_factory=OffHostSettings.model_construct)
    policy: PolicySettings = Field(default_factory=PolicySettings.model_construct)
    limits: LimitSettings = Field(default_factory=LimitSettings.model_construct)
    sessions: SessionSettings = Field(default_factory=SessionSettings.model_construct)
    jobs: JobSettings = Field(default_factory=JobSettings.model_construct)
    ssh: SshSettings = Field(default_factory=SshSettings.model_construct)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings.model_construct)
    trace: TraceSettings = Field(default_factory=TraceSettings.model_construct)
    runbooks: RunbookSettings = Field(default_factory=RunbookSettings.model_construct)

    def __init__(self, **values: Any) -> None:
        """The settings from `values` (by area, as `by_area` groups them), over the environment, over the config
        file; an invalid value raises pydantic's ValidationError located at (area, setting)."""
        super().__init__(**merged_sources(values))

    @model_validator(mode="after")
    def _offhost_needs_chain(self) -> Settings:
        # The receiver drops duplicates by `seq` and the shipper resumes by the chain; a checkpoint signs the head.
        if not self.audit.audit_chain and self.offhost.ships():
            raise ValueError(
                "RELAY_SHELL_AUDIT_CHAIN=false: AUDIT_SYSLOG, AUDIT_JOURNALD and AUDIT_SIGNING_KEY need the hash "
                "chain (shipping "
                "resumes by seq and chain, a checkpoint signs the chain head); set AUDIT_CHAIN=true"
            )
        return self


def areas() -> dict[str, type[BaseModel]]:
    """Each area's name (its section in the file, its attribute of Settings) and its model."""
    return {name: field.annotation for name, field in Settings.model_fields.items()}  # type: ignore[misc]


@functools.cache
def setting_fields() -> dict[str, tuple[str, FieldInfo]]:
    """Every setting by name (RELAY_SHELL_<NAME>, lower-cased): its area and its field (default, description)."""
    return {name: (area, field) for area, model in areas().items() for name, field in model.model_fields.items()}


def by_area(flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Settings given by name (`max_sessions=2`) grouped by area (`{"sessions": {"max_sessions": 2}}`), as
    Settings(...) takes them (an area's dict is merged as it is); ValueError for a name that is neither."""
    fields = setting_fields()
    grouped: dict[str, dict[str, Any]] = {}
    for name, value in flat.items():
        if name in Settings.model_fields and isinstance(value, Mapping):
            grouped.setdefault(name, {}).update(value)
        elif name in fields:
            grouped.setdefault(fields[name][0], {})[name] = value
        else:
            raise ValueError(f"{name!r} is not a relay-shell setting")
    return grouped


def environment_values() -> dict[str, str]:
    """The RELAY_SHELL_* variables that name a setting, by setting name. Case-insensitive, as pydantic-settings'
    own environment source was before the areas."""
    fields = setting_fields()
    prefix = ENV_PREFIX.lower()
    values = {}
    for variable, value in os.environ.items():
        lowered = variable.lower()
        if lowered.startswith(prefix) and lowered[len(prefix) :] in fields:
            values[lowered[len(prefix) :]] = value
    return values


def merged_sources(values: Mapping[str, Any]) -> dict[str, Any]:
    """The sources, highest first: keyword arguments, RELAY_SHELL_<NAME> for every setting of every area (the
    variables keep the flat names they always had), the config file. A higher source's value replaces a lower
    one's setting by setting within an area; whatever is not a table of settings replaces it whole."""
    sources = [dict(values), by_area(environment_values())]
    path = config_file_path()
    if path is not None:
        from relay_shell.settings.toml_file import file_values  # pydantic-settings and tomllib: only for a file

        sources.append(file_values(path))
    merged: dict[str, Any] = {}
    for source in reversed(sources):
        for area, value in source.items():
            # As written: TOML names are case-sensitive, so `[SESSIONS]` is no area (an error naming [sessions]),
            # never read as [sessions] beside a [sessions] of its own.
            below = merged.get(area)
            if isinstance(value, Mapping) and isinstance(below, Mapping):
                merged[area] = {**below, **value}
            else:
                merged[area] = value
    return merged
