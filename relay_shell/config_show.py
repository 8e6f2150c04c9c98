"""`relay-shell config show`: the effective settings as TOML, grouped by area as in the config file, each value
followed by where it came from: `environment RELAY_SHELL_X` (which wins), `file PATH:LINE`, or `default`.

Secrets are masked: the settings that say where key and token material is kept (the token file, the OAuth state,
the signing and TLS client keys), and any single value the audit log's redaction would hide (a password in a URL).
A masked line is commented out, so the output stays a config file that gives the same settings apart from those:
never one that silently holds "[REDACTED]" as a path. Lists are shown as they are: deny and allow patterns, host
and variable names are no secrets, and a pattern that looks like one (`--password=.+`) is exactly what a deny
list holds; masking it would drop the list from a file made from this output (review S4).
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic.fields import FieldInfo

from relay_shell import __version__
from relay_shell.redaction.redact import redact
from relay_shell.redaction.values import REDACTED
from relay_shell.settings.file import CONFIG_VARIABLE, config_file_path, key_line, toml_value
from relay_shell.settings.load import load_settings, startup_warnings
from relay_shell.settings.model import ENV_PREFIX, Settings, areas, environment_values, setting_fields


def show_settings() -> int:
    settings = load_settings()  # ConfigError: cli.py prints it
    for warning in startup_warnings():
        print(f"relay-shell: warning: {warning}", file=sys.stderr)
    sys.stdout.write(render(settings, sources()))
    return 0


def sources() -> dict[tuple[str, str], str]:
    """Where each setting's value came from, by (area, name)."""
    path = config_file_path()
    text = ""
    in_file: dict[str, Any] = {}
    if path is not None:
        import tomllib

        text = path.read_text()
        in_file = tomllib.loads(text)
    environment = environment_values()
    found = {}
    for name, (area, _) in setting_fields().items():
        if name in environment:
            found[area, name] = f"environment {ENV_PREFIX}{name.upper()}"
        elif name in in_file.get(area, {}):
            found[area, name] = f"file {path}:{key_line(text, (area, name))}"
        else:
            found[area, name] = "default"
    return found


def render(settings: Settings, where: dict[tuple[str, str], str]) -> str:
    path = config_file_path()
    lines = [
        f"# relay-shell {__version__}: the effective settings, each followed by where it came from: the environment",
        "# (RELAY_SHELL_*), which overrides the config file, which overrides the defaults. Masked values are",
        "# commented out.",
        f"# Config file: {path} ({CONFIG_VARIABLE} or --config)" if path is not None else "# Config file: none",
    ]
    values = settings.model_dump(mode="json")
    for area, model in areas().items():
        rows = []
        for name, field in model.model_fields.items():
            shown, masked = masked_value(field, values[area][name])
            line = f"{name} = {toml_value(shown)}"
            rows.append((f"# {line}" if masked else line, where[area, name] + (" (masked)" if masked else "")))
        width = max(len(line) for line, _ in rows)
        lines += ["", f"[{area}]", *(f"{line:<{width}}  # {source}" for line, source in rows)]
    return "\n".join(lines) + "\n"


def masked_value(field: FieldInfo, value: Any) -> tuple[Any, bool]:
    """The value to show, and whether it is masked."""
    if value is None or value == "":
        return value, False  # nothing to hide
    extra = field.json_schema_extra
    if isinstance(extra, dict) and extra.get("secret"):
        return REDACTED, True
    if isinstance(value, str) and redact(value) != value:
        return redact(value), True
    return value, False  # a list (patterns, names) as it is
