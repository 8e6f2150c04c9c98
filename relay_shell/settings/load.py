"""Loading the settings at startup: an invalid value stops it with exit code 2 and one line naming the setting (the
variable, or the file, line and key), the bad value and what is allowed; a misspelt key in the file is an error
naming the nearest valid one, a misspelt RELAY_SHELL_* variable a warning (the environment is shared, the file is
ours).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from relay_shell.errors import ConfigError
from relay_shell.settings.file import CONFIG_VARIABLE, config_file_path, key_line, toml_value, unsafe_place
from relay_shell.settings.model import ENV_PREFIX, Settings, areas, environment_values, setting_fields

# Not settings: the containment marker every command inherits (a relay-shell started by a command sees it;
# containment/proc.py MARKER_VARIABLE), and the test suite's simulated Landlock ABI (confine/landlock.py
# SIMULATED_ABI_VARIABLE), which the banner warns about when set.
NOT_SETTINGS = {"RELAY_SHELL_UNIT", CONFIG_VARIABLE, "RELAY_SHELL_TEST_SIMULATE_LANDLOCK_ABI"}


def load_settings() -> Settings:
    path = config_file_path()
    if path is not None and not path.is_file():
        raise ConfigError(f"{CONFIG_VARIABLE}={str(path)!r}: no such file; allowed: the path of a TOML config file")
    try:
        problem = unsafe_place(path) if path is not None else None
    except OSError as exc:  # a link loop, or the path changed while it was walked
        raise ConfigError(f"{path}: cannot check who may change it: {exc.strerror or exc}") from None
    if problem is not None:  # whoever can write the file sets the policy: refused, as sshd refuses its own
        raise ConfigError(
            f"{path}: refused: {problem}; allowed: a file, the directories above it and any symbolic link on the "
            "way, owned by root or the server's user and writable by no one else (chmod go-w, chown)"
        )
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError(describe_error(exc, path)) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:  # tomllib.TOMLDecodeError: "Invalid value (at line 3, column 15)"
        if path is None:
            raise
        found = re.search(r" \(at line ([0-9]+), column ([0-9]+)\)$", str(exc))
        if found is None:
            raise ConfigError(f"{path}: not valid TOML: {exc}") from None
        problem = str(exc)[: found.start()]
        raise ConfigError(f"{path}:{found.group(1)}: not valid TOML: {problem} (column {found.group(2)})") from None


def describe_error(exc: ValidationError, path: Path | None) -> str:
    """The first problem, as one line; a key the file misspells first of all (it may explain the others)."""
    errors = exc.errors()
    error = next((each for each in errors if each["type"] == "extra_forbidden"), errors[0])
    location = tuple(str(part) for part in error["loc"])
    problem = str(error["msg"]).removeprefix("Value error, ")
    if len(location) < 2:
        if error["type"] == "extra_forbidden" or error["type"] == "model_type":
            return _file_prefix(path, location) + _section_problem(location[0], error)
        return _rule_prefix(path, problem) + problem  # a rule over several settings: its message names them
    area, name = location[0], location[1]
    if error["type"] == "extra_forbidden":
        return _file_prefix(path, (area, name)) + _unknown_key(area, name)
    description = areas()[area].model_fields[name].description
    if name in environment_values():
        variable = ENV_PREFIX + name.upper()
        return f"{variable}={os.environ.get(variable, environment_values()[name])!r}: {problem}; allowed: {description}"
    if path is not None:
        value = toml_value(error.get("input"))
        return f"{_file_prefix(path, (area, name))}[{area}] {name} = {value}: {problem}; allowed: {description}"
    return f"{ENV_PREFIX}{name.upper()}={'':!r}: {problem}; allowed: {description}"


def _file_prefix(path: Path | None, location: tuple[str, ...]) -> str:
    if path is None:
        return ""
    try:
        line = key_line(path.read_text(errors="replace"), location)
    except OSError:
        line = None
    return f"{path}:{line}: " if line is not None else f"{path}: "


def _rule_prefix(path: Path | None, problem: str) -> str:
    """For a rule over several settings, the file and line of the first one it names that the file sets."""
    if path is None:
        return ""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    import tomllib

    in_file = tomllib.loads(text)
    environment = environment_values()
    for name, (area, _) in setting_fields().items():
        named = re.search(rf"(?<![A-Z_])(?:{ENV_PREFIX})?{name.upper()}(?![A-Z_])", problem) is not None
        if named and name not in environment and name in in_file.get(area, {}):
            return f"{path}:{key_line(text, (area, name))}: "
    return ""


def _section_problem(key: str, error: ErrorDetails) -> str:
    import difflib  # ~1 ms: only for a key the file misspells

    sections = list(areas())
    if error["type"] == "model_type":
        return f"[{key}]: must be a table of settings ([{key}] then `name = value` lines)"
    fields = setting_fields()
    if key.lower() in sections:
        return f"[{key}]: unknown section (TOML names are case-sensitive); did you mean [{key.lower()}]?"
    if key in fields:
        return f"{key}: a setting outside its section; put it under [{fields[key][0]}]"
    nearest = difflib.get_close_matches(key, sections, n=1)
    if nearest:
        return f"[{key}]: unknown section; did you mean [{nearest[0]}]?"
    nearest = difflib.get_close_matches(key, list(fields), n=1)
    if nearest:
        return f"{key}: unknown setting; did you mean [{fields[nearest[0]][0]}] {nearest[0]}?"
    return f"[{key}]: unknown section; allowed: {', '.join(f'[{name}]' for name in sections)}"


def _unknown_key(area: str, name: str) -> str:
    import difflib

    in_area = list(areas()[area].model_fields)
    if name.lower() in in_area:
        return f"[{area}] {name}: unknown setting (TOML names are case-sensitive); did you mean {name.lower()}?"
    nearest = difflib.get_close_matches(name, in_area, n=1)
    if nearest:
        return f"[{area}] {name}: unknown setting; did you mean {nearest[0]}?"
    fields = setting_fields()
    nearest = difflib.get_close_matches(name, list(fields), n=1)
    if nearest:
        return f"[{area}] {name}: unknown setting in [{area}]; did you mean [{fields[nearest[0]][0]}] {nearest[0]}?"
    return f"[{area}] {name}: unknown setting; allowed in [{area}]: {', '.join(in_area)}"


def startup_warnings() -> list[str]:
    """What an operator should hear about a configuration that loads: misspelt variables, and empty ones that
    override what the file sets (review N3)."""
    warnings = [f"{name} is not a relay-shell setting (typo?); ignored" for name in unknown_variables()]
    return warnings + empty_overrides()


def empty_overrides() -> list[str]:
    """An empty RELAY_SHELL_* variable overrides the file as any other does, and empty means "none" or "off": a
    deny list the file sets is emptied by `RELAY_SHELL_POLICY_DENY=` left over in a unit or a compose file. That is
    allowed (the environment wins, and empty is how a setting is turned off) but never silent."""
    path = config_file_path()
    empty = [name for name, value in environment_values().items() if not value.strip()]
    if path is None or not empty:
        return []
    import tomllib

    text = path.read_text(errors="replace")
    in_file = tomllib.loads(text)
    fields = setting_fields()
    warnings = []
    for name in empty:
        area = fields[name][0]
        if name in in_file.get(area, {}):
            where = f"{path}:{key_line(text, (area, name))}"
            warnings.append(
                f"{ENV_PREFIX}{name.upper()} is empty and overrides [{area}] {name} set in {where}: the setting is "
                "empty; unset the variable to use the file's value"
            )
    return warnings


def unknown_variables() -> list[str]:
    """RELAY_SHELL_* names that no setting reads: usually a typo an operator wants to hear about."""
    known = {ENV_PREFIX + name.upper() for name in setting_fields()} | NOT_SETTINGS
    return sorted(name for name in os.environ if name.startswith(ENV_PREFIX) and name not in known)
