"""The contract in docs/: its mechanical parts generated from the code, its record tools checked against it.

    python -m scripts.contract          # rewrite the generated sections of docs/contract.md, tools.md, settings.md
    python -m scripts.contract --check  # change nothing; exit 1 and say what differs when the docs lag the code

What is generated, each from a public face of the code that survives refactoring:
- tools and their arguments, annotations and result fields, prompts, resources: a real `relay-shell` started over
  stdio (`python -m relay_shell`, no RELAY_SHELL_* setting but a temporary audit log, HOME a temporary directory)
  answering tools/list, prompts/list, resources/list and resources/templates/list;
- settings: every field of the Settings model, with its RELAY_SHELL_* name, default and description;
- metrics: the Prometheus registry Metrics builds (names, types, help) with their label names.
What is checked, not generated: the record tools (the `tool` of records that are no tool call: `server:start`,
`session:end`, `exec:late`, `audit:checkpoint`, …) that the code writes, against the table in docs/contract.md,
whose descriptions are written by hand. tests/integration/test_contract.py fails on any difference.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = Path("docs/contract.md")
TOOLS = Path("docs/tools.md")
SETTINGS = Path("docs/settings.md")
PROTOCOL_VERSION = "2025-11-25"
# `tool` values of records that are no tool call have the shape family:name. String constants of that shape in
# relay_shell/ that are not record tools, with why:
NOT_RECORD_TOOLS = {
    "user:password": "redaction: the kind of option whose value is user:password (redaction/tool_options.py)",
    "prompt:runbook": "the metric label every runbook prompt is counted under; its records name the prompt",
}
RECORD_TOOL = re.compile(r"[a-z]+:[a-z_]+")
# Families whose second part is a name made at run time (f"prompt:{name}"): documented as `family:<name>`.
NAMED_FAMILIES = ("prompt", "resource")
RECORD_TOOLS_START = "<!-- record-tools:start -->"
RECORD_TOOLS_END = "<!-- record-tools:end -->"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate (or --check) the contract in docs/ from the code.")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when the docs differ")
    arguments = parser.parse_args(argv)
    if arguments.check:
        problems = differences(ROOT)
        for problem in problems:
            print(problem)
        if problems:
            print(f"{len(problems)} difference(s): run python -m scripts.contract")
        else:
            print("docs/ matches the code")
        return 1 if problems else 0
    for path, text in regenerated(ROOT).items():
        (ROOT / path).write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    problems = record_tool_differences(ROOT)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


# -- what differs ---------------------------------------------------------------------------------------------------


def differences(root: Path) -> list[str]:
    """Every way docs/ and the code disagree: a generated section that is not what the code gives now (with the
    lines that differ), and record tools on one side only."""
    return compare(regenerated(root), root) + record_tool_differences(root)


def compare(expected: dict[Path, str], docs_root: Path) -> list[str]:
    """The docs files under `docs_root` that are not the `expected` text, each with the lines that differ."""
    problems = []
    for path, text in expected.items():
        current = (docs_root / path).read_text(encoding="utf-8")
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(), text.splitlines(), f"{path} (now)", f"{path} (from the code)", lineterm="", n=0
            )
            problems.append(f"{path} is not what the code gives:\n" + "\n".join(diff))
    return problems


def record_tool_differences(root: Path, contract_text: str | None = None) -> list[str]:
    """Record tools the code writes and docs/contract.md does not list, and the other way round."""
    in_code = record_tools_in_code(root / "relay_shell")
    in_docs = record_tools_in_docs(contract_text or (root / CONTRACT).read_text(encoding="utf-8"))
    problems = [f"record tool `{label}` is written by the code and not in {CONTRACT}" for label in in_code - in_docs]
    problems += [f"record tool `{label}` is in {CONTRACT} and not in the code" for label in in_docs - in_code]
    return sorted(problems)
    return problems


def record_tools_in_code(package: Path) -> set[str]:
    """The `family:name` labels the code writes as a record's tool (string constants of that shape, and
    f"prompt:{…}" / f"resource:{…}" as `prompt:<name>` / `resource:<name>`)."""
    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and RECORD_TOOL.fullmatch(node.value):
                found.add(node.value)
            elif isinstance(node, ast.JoinedStr) and len(node.values) == 2:
                head, tail = node.values
                prefix = head.value if isinstance(head, ast.Constant) and isinstance(head.value, str) else None
                if prefix in [f"{family}:" for family in NAMED_FAMILIES] and isinstance(tail, ast.FormattedValue):
                    found.add(f"{prefix}<name>")
    return found - set(NOT_RECORD_TOOLS)


def record_tools_in_docs(text: str) -> set[str]:
    """The labels in the first column of the record tools table of docs/contract.md."""
    if RECORD_TOOLS_START not in text or RECORD_TOOLS_END not in text:
        return set()
    table = text.split(RECORD_TOOLS_START, 1)[1].split(RECORD_TOOLS_END, 1)[0]
    labels = set()
    for row in table.splitlines():
        cells = row.strip().strip("|").split("|")
        if row.strip().startswith("|") and cells:
            labels.update(re.findall(r"`([a-z]+:[a-z_<>]+)`", cells[0]))
    return labels


# -- generating -----------------------------------------------------------------------------------------------------


def regenerated(root: Path) -> dict[Path, str]:
    """Each docs file with its generated sections made anew from the code (the prose around them kept)."""
    surface = live_surface(root)
    sections = {
        CONTRACT: {
            "tools": tools_summary(surface["tools"]),
            "results": result_fields(surface["tools"]),
            "prompts": prompts_table(surface["prompts"]),
            "resources": resources_table(surface["resources"], surface["templates"]),
            "metrics": metrics_table(),
        },
        TOOLS: {"tool-arguments": tool_arguments(surface["tools"])},
        SETTINGS: {"settings": settings_table()},
    }
    files = {}
    for path, generated in sections.items():
        text = (root / path).read_text(encoding="utf-8")
        for name, body in generated.items():
            text = replace_section(text, name, body, path)
        files[path] = text
    return files


def replace_section(text: str, name: str, body: str, path: Path) -> str:
    start = f"<!-- generated: {name} (python -m scripts.contract) -->"
    end = f"<!-- end generated: {name} -->"
    if start not in text or end not in text:
        raise SystemExit(f"{path}: no section {start} … {end} to generate into")
    before, rest = text.split(start, 1)
    after = rest.split(end, 1)[1]
    return f"{before}{start}\n{body.rstrip()}\n{end}{after}"


def live_surface(root: Path) -> dict[str, list[dict[str, Any]]]:
    """What a client sees of a relay-shell with every setting at its default: tools, prompts, resources."""
    with tempfile.TemporaryDirectory(prefix="relay-shell-contract-") as home:
        environment = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "LANG": "C.UTF-8",
            "RELAY_SHELL_AUDIT_PATH": str(Path(home) / "audit.jsonl"),
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "relay_shell"],
            cwd=root,
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            client = {"name": "relay-shell contract", "version": "1"}
            ask(
                process,
                1,
                "initialize",
                {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": client},
            )
            send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            return {
                "tools": listed(process, 2, "tools/list", "tools"),
                "prompts": listed(process, 3, "prompts/list", "prompts"),
                "resources": listed(process, 4, "resources/list", "resources"),
                "templates": listed(process, 5, "resources/templates/list", "resourceTemplates"),
            }
        finally:
            if process.stdin is not None:
                process.stdin.close()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def send(process: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert process.stdin is not None
    process.stdin.write(json.dumps(message).encode() + b"\n")
    process.stdin.flush()


def ask(process: subprocess.Popen[bytes], request_id: int, method: str, params: dict[str, Any]) -> dict[str, Any]:
    send(process, {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        if not line:
            stderr = process.stderr.read().decode(errors="replace") if process.stderr is not None else ""
            raise SystemExit(f"relay-shell closed stdout before answering {method}:\n{stderr}")
        message: dict[str, Any] = json.loads(line)
        if message.get("id") == request_id:
            if "error" in message:
                raise SystemExit(f"{method}: {message['error']}")
            return dict(message["result"])


def listed(process: subprocess.Popen[bytes], request_id: int, method: str, key: str) -> list[dict[str, Any]]:
    """Every item of a list method, following nextCursor."""
    items: list[dict[str, Any]] = []
    params: dict[str, Any] = {}
    while True:
        result = ask(process, request_id, method, params)
        items += result.get(key, [])
        if not result.get("nextCursor"):
            return items
        params = {"cursor": result["nextCursor"]}
        request_id += 100


# -- the sections ---------------------------------------------------------------------------------------------------


def tools_summary(tools: list[dict[str, Any]]) -> str:
    rows = ["| tool | title | hints | arguments (* required; defaults in brackets) |", "|---|---|---|---|"]
    for tool in tools:
        schema = tool.get("inputSchema", {})
        required = set(schema.get("required", []))
        arguments = []
        for name, argument in schema.get("properties", {}).items():
            shown = argument.get("default") not in (None, "")
            default = f" [{default_text(argument['default'])}]" if shown else ""
            arguments.append(f"`{name}`{'*' if name in required else ''}{default}")
        rows.append(
            f"| `{tool['name']}` | {tool.get('title', '')} | {hints(tool.get('annotations', {}))} | "
            f"{', '.join(arguments) or '—'} |"
        )
    return "\n".join(rows)


def hints(annotations: dict[str, Any]) -> str:
    """The annotations as short words: read-only or writes (destructive, idempotent), open-world."""
    words = ["read-only" if annotations.get("readOnlyHint") else "writes"]
    if not annotations.get("readOnlyHint"):
        words.append("destructive" if annotations.get("destructiveHint", True) else "not destructive")
    if annotations.get("idempotentHint"):
        words.append("idempotent")
    if annotations.get("openWorldHint", True):
        words.append("open world")
    return ", ".join(words)


def tool_arguments(tools: list[dict[str, Any]]) -> str:
    parts = []
    for tool in tools:
        schema = tool.get("inputSchema", {})
        required = set(schema.get("required", []))
        output = tool.get("outputSchema", {})
        parts.append(f"### `{tool['name']}` — {tool.get('title', '')}\n")
        parts.append(first_paragraph(tool.get("description", "")) + "\n")
        parts.append(f"Hints: {hints(tool.get('annotations', {}))}. Result: `{output.get('title', 'none')}`.\n")
        rows = ["| argument | type | default | description |", "|---|---|---|---|"]
        for name, argument in schema.get("properties", {}).items():
            default = "required" if name in required else default_text(argument.get("default"), none="—")
            description = cell(argument.get("description", ""))
            rows.append(f"| `{name}` | {schema_type(argument, schema)} | {default} | {description} |")
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def result_fields(tools: list[dict[str, Any]]) -> str:
    """The fields every result model has, once; then each model (a tool's outputSchema) with the tools that return
    it and its own fields."""
    models: dict[str, dict[str, Any]] = {}
    users: dict[str, list[str]] = {}
    for tool in tools:
        output = tool.get("outputSchema")
        if output is not None:
            title = output.get("title", tool["name"])
            models.setdefault(title, output)
            users.setdefault(title, []).append(f"`{tool['name']}`")
    rows_of = {title: field_rows(output) for title, output in models.items()}
    shared = [row for row in next(iter(rows_of.values()), []) if all(row in rows for rows in rows_of.values())]
    parts = ["Every result model:\n", field_table(shared)]
    for title, rows in rows_of.items():
        own = [row for row in rows if row not in shared]
        parts.append(
            f"**`{title}`** ({', '.join(users[title])}): " + ("its own fields:\n" if own else "no other field.\n")
        )
        if own:
            parts.append(field_table(own))
    return "\n".join(parts)


def field_rows(output: dict[str, Any]) -> list[str]:
    return [
        f"| `{name}` | {schema_type(field, output)} | {cell(field.get('description', ''))} |"
        for name, field in output.get("properties", {}).items()
    ]


def field_table(rows: list[str]) -> str:
    return "\n".join(["| field | type | description |", "|---|---|---|", *rows]) + "\n"


def prompts_table(prompts: list[dict[str, Any]]) -> str:
    rows = ["| prompt | arguments (* required) | description |", "|---|---|---|"]
    for prompt in prompts:
        arguments = ", ".join(
            f"`{argument['name']}`{'*' if argument.get('required') else ''}" for argument in prompt.get("arguments", [])
        )
        description = cell(first_sentence(prompt.get("description", "")))
        rows.append(f"| `{prompt['name']}` | {arguments or '—'} | {description} |")
    return "\n".join(rows)


def resources_table(resources: list[dict[str, Any]], templates: list[dict[str, Any]]) -> str:
    rows = ["| resource | name | description |", "|---|---|---|"]
    for resource in resources:
        description = cell(first_sentence(resource.get("description", "")))
        rows.append(f"| `{resource['uri']}` | {resource.get('name', '')} | {description} |")
    for template in templates:
        description = cell(first_sentence(template.get("description", "")))
        rows.append(f"| `{template['uriTemplate']}` (template) | {template.get('name', '')} | {description} |")
    return "\n".join(rows)


def settings_table() -> str:
    rows = ["| variable | in the config file | default | allowed, and what it does |", "|---|---|---|---|"]
    for variable, area, default, description in settings_rows():
        key = variable.removeprefix("RELAY_SHELL_").lower()
        rows.append(f"| `{variable}` | `[{area}]` `{key}` | {default} | {cell(description)} |")
    return "\n".join(rows)


def settings_rows() -> list[tuple[str, str, str, str]]:
    """(RELAY_SHELL_ name, area, default, description) of every field of the Settings model, by area."""
    from pydantic import BaseModel
    from pydantic_core import PydanticUndefined

    from relay_shell.settings.model import ENV_PREFIX, Settings

    rows: list[tuple[str, str, str, str]] = []

    def walk(model: type[BaseModel], area: str = "") -> None:
        # Defaults as the settings' own serializers write them (a parsed value, such as CheckpointInterval, as text).
        defaults = model.model_construct().model_dump(mode="json") if model is not Settings else {}
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, name)  # a settings area: its fields keep their flat RELAY_SHELL_ names
                continue
            variable = env_name(field.validation_alias, ENV_PREFIX) or ENV_PREFIX + name.upper()
            if field.default_factory is not None:
                default = "computed at start-up"
            elif field.default is PydanticUndefined:
                default = "required"
            else:
                default = default_text(defaults.get(name, field.default))
            rows.append((variable, area, default, field.description or ""))

    walk(Settings)
    return rows


def env_name(alias: object, prefix: str) -> str | None:
    """The RELAY_SHELL_ name a field's validation alias gives it (a string, or the first of AliasChoices)."""
    choices = getattr(alias, "choices", None)
    for choice in [alias] if choices is None else list(choices):
        if isinstance(choice, str):
            return choice.upper() if choice.upper().startswith(prefix) else prefix + choice.upper()
    return None


def metrics_table() -> str:
    from relay_shell.metrics import DEFINITIONS, Metrics

    labels = {definition.name: definition.labels for definition in DEFINITIONS}
    rows = ["| metric | type | labels | what it counts |", "|---|---|---|---|"]
    for family in Metrics(enabled=True).registry.collect():
        exposed = f"{family.name}_total" if family.type == "counter" else family.name
        label_names = ", ".join(f"`{label}`" for label in labels[family.name]) or "—"
        rows.append(f"| `{exposed}` | {family.type} | {label_names} | {cell(family.documentation)} |")
    return "\n".join(rows)


# -- text helpers ---------------------------------------------------------------------------------------------------


def schema_type(schema: dict[str, Any], root: dict[str, Any]) -> str:
    if "$ref" in schema:
        target = root.get("$defs", {}).get(schema["$ref"].rsplit("/", 1)[-1], {})
        return schema_type(target, root) if "properties" not in target else f"`{target.get('title', 'object')}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(value)}`" for value in schema["enum"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(dict.fromkeys(schema_type(option, root) for option in schema[key]))
    kind = schema.get("type")
    if kind == "array":
        return f"list of {grouped(schema_type(schema.get('items', {}), root))}"
    if kind == "object":
        values = schema.get("additionalProperties")
        return f"object of {grouped(schema_type(values, root))}" if isinstance(values, dict) else "object"
    if isinstance(kind, list):
        return " or ".join(str(item) for item in kind)
    return str(kind) if kind else "any"


def grouped(type_text: str) -> str:
    return f"({type_text})" if " or " in type_text else type_text


def default_text(value: Any, none: str = "empty") -> str:
    if value is None:
        return none
    if value == "" or value == []:
        return "empty"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str | int | float):
        return str(value)
    return f"`{json.dumps(value)}`"


def first_paragraph(text: str) -> str:
    return " ".join(text.strip().split("\n\n", 1)[0].split())


def first_sentence(text: str) -> str:
    """The text up to its first full stop, or its first line without a closing colon."""
    paragraph = first_paragraph(text)
    match = re.match(r"(.+?\.)(\s|$)", paragraph)
    if match is not None:
        return match.group(1)
    return text.strip().splitlines()[0].rstrip(":") if text.strip() else ""


def cell(text: str) -> str:
    """Text fit for one table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


if __name__ == "__main__":
    raise SystemExit(main())
