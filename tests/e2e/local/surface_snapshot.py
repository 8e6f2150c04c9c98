"""The MCP surface and the audit log of a fixed scenario, normalised so that two runs of the same code give the
same JSON: what a client sees (tools with their schemas and annotations, prompts, resources, templates) and what
the log keeps of a fixed set of calls (timestamps, ids, chain hashes and the digests of outputs that quote them
are masked).

`tests/data/surface_snapshot.json` was written by this module from commit 682d9a6 (main before the renovation of
issue 25): `python -m tests.e2e.local.surface_snapshot > tests/data/surface_snapshot.json`. The test
(`test_surface_unchanged.py`) runs the same scenario on the code under test and compares.
It is written and compared as root, as CI runs it: the exec trace's default (`auto`, adr/0027) traces a root
server, so the records carry `execs` (their process ids and times masked); a user's open-mode server runs
untraced.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
from mcp import Client

from tests.conftest import connect, read_records, text_of

# Record fields that differ between two runs of the same code.
RUN_FIELDS = {"ts", "prev", "chain", "call_id", "call_tag", "pid", "duration_ms", "session_id", "confirmation"}
# Records whose output quotes run-dependent values (session ids, cursors, times, paths, the pid): their digests
# and lengths are masked too.
QUOTING_TOOLS = {
    "shell_spawn",
    "session_send",
    "session_recv",
    "session_list",
    "session_kill",
    "session:end",
    "server_info",
    "audit_tail",
    "operation_confirm",
}
# An exec trace entry's process ids and time (the paths, argv, outcomes and the digest over them are the run's own).
EXEC_RUN_FIELDS = {"pid", "ppid", "t_ms"}
DIGEST_FIELDS = {"output_sha256", "output_len", "raw_sha256", "raw_len", "stderr_sha256", "stderr_len"}


def normalise_record(record: dict[str, Any]) -> dict[str, Any]:
    masked = {key: value for key, value in record.items() if key not in RUN_FIELDS}
    if isinstance(masked.get("args"), dict) and "session_id" in masked["args"]:
        masked["args"] = {**masked["args"], "session_id": "<session>"}
    execs = masked.get("execs")
    if isinstance(execs, dict) and isinstance(execs.get("entries"), list):
        entries = [
            {key: value for key, value in entry.items() if key not in EXEC_RUN_FIELDS} for entry in execs["entries"]
        ]
        masked["execs"] = {**execs, "entries": entries}
    quoting = record.get("tool") in QUOTING_TOOLS or record.get("outcome") == "confirm_required"
    if quoting or record.get("tool") == "server:start":
        masked = {key: value for key, value in masked.items() if key not in DIGEST_FIELDS}
    if record.get("tool") == "server:start":
        masked.pop("scan", None)  # how far the previous log was read
        masked.pop("interrupted", None)
        if "readonly_enforcement" in masked.get("policy", {}):  # the kernel's Landlock ABI (adr/0024)
            masked["policy"] = {
                **masked["policy"],
                "readonly_enforcement": _abi_masked(masked["policy"]["readonly_enforcement"]),
            }
    if "confinement" in masked:
        masked["confinement"] = _abi_masked(masked["confinement"])
    return masked


def _abi_masked(enforcement: str) -> str:
    """`landlock ABI 7` is `landlock ABI N`: the same code on another kernel enforces readonly the same way."""
    return re.sub(r"^landlock ABI \d+$", "landlock ABI N", enforcement)


async def surface(client: Client) -> dict[str, Any]:
    tools = (await client.list_tools()).tools
    prompts = (await client.list_prompts()).prompts
    resources = (await client.list_resources()).resources
    templates = (await client.list_resource_templates()).resource_templates
    return {
        "tools": [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools],
        "prompts": [prompt.model_dump(mode="json", by_alias=True, exclude_none=True) for prompt in prompts],
        "resources": [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in resources],
        "templates": [item.model_dump(mode="json", by_alias=True, exclude_none=True) for item in templates],
    }


async def open_mode_calls(client: Client) -> list[Any]:
    """Calls whose results are the same on every run; the others are made for their records."""
    results: list[Any] = []

    async def keep(name: str, arguments: dict[str, Any]) -> None:
        result = await client.call_tool(name, arguments)
        text = re.sub(r'token="[^"]+"', 'token="<token>"', text_of(result)).replace(str(Path.cwd()), "<cwd>")
        results.append({"tool": name, "text": text, "is_error": result.is_error})

    await keep("shell_exec", {"command": "echo hello"})
    await keep("shell_exec", {"command": "echo out; echo err >&2; exit 3", "merge_stderr": False})
    await keep("shell_exec", {"command": "echo x", "timeout": "soon"})
    await keep("no_such_tool", {"x": 1})
    await keep("shell_exec", {"command": "echo x", "no_such_argument": 1})
    await keep("shell_script", {"script": "echo a\necho b", "interpreter": "sh"})
    await keep("shell_exec", {"command": ["printf", "%s", "argv"], "use_shell": False})
    await keep("shell_exec", {"command": "printf '%s' \"$GREETING\"", "env": {"GREETING": "hi"}})
    await keep("ssh_hosts", {})
    await keep("runbook_search", {"tags": ["disk"]})
    await keep("shell_exec", {"command": "dd if=/dev/zero of=/dev/sda"})  # tier 3: a confirmation is asked
    spawned = await client.call_tool("shell_spawn", {"command": "sh"})
    session_id = (spawned.structured_content or {}).get("session_id")
    await client.call_tool("session_send", {"session_id": session_id, "data": "echo hi-there", "until": "^hi-there"})
    await client.call_tool("session_recv", {"session_id": session_id, "timeout": 0.2})
    await client.call_tool("session_list", {})
    await client.call_tool("session_kill", {"session_id": session_id})
    await client.call_tool("server_info", {})
    await client.call_tool("audit_tail", {"lines": 2})
    await keep("operation_confirm", {"token": "not-a-token"})
    guide = await client.get_prompt("operating_guide", {})
    results.append({"prompt": "operating_guide", "messages": [m.model_dump(mode="json") for m in guide.messages]})
    inventory = await client.read_resource("relay-shell://inventory")
    results.append({"resource": "inventory", "contents": [c.model_dump(mode="json") for c in inventory.contents]})
    return results


async def readonly_calls(client: Client) -> list[Any]:
    results: list[Any] = []
    for arguments in ({"command": "touch /tmp/relay-shell-snapshot-never"}, {"command": "cat /etc/hostname"}):
        result = await client.call_tool("shell_exec", arguments)
        results.append({"tool": "shell_exec", "text": text_of(result).splitlines()[0], "is_error": result.is_error})
    try:
        await client.get_prompt("fleet_change", {"goal": "g", "hosts": "h", "command": "c"})
    except Exception as exc:  # hidden in readonly mode: a protocol error
        results.append({"prompt": "fleet_change", "error": str(exc)})
    return results


async def scenario(directory: Path) -> dict[str, Any]:
    audit_path = directory / "audit.jsonl"
    quiet = {"ssh_config": "", "containment": "off"}
    async with connect(audit_path, confirm_tier3="token", **quiet) as client:
        shown = await surface(client)
        open_results = await open_mode_calls(client)
    async with connect(audit_path, policy_mode="readonly", **quiet) as client:
        readonly_surface = await surface(client)
        readonly_results = await readonly_calls(client)
    records = [normalise_record(record) for record in read_records(audit_path)]
    return {
        "surface": shown,
        "readonly_surface": readonly_surface,
        "results": open_results + readonly_results,
        "records": records,
    }


async def _main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        snapshot = await scenario(Path(directory))
    sys.stdout.write(orjson.dumps(snapshot, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode() + "\n")


if __name__ == "__main__":
    anyio.run(_main)
