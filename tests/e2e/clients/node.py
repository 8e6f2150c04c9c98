"""The independent clients, written in TypeScript and run by Node: the MCP Inspector CLI, the official
TypeScript SDK and the MCP conformance suite, as scripts/test.sh installs them under .cache/npm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT

NODE_MODULES = REPO_ROOT / ".cache/npm/node_modules"


def inspector_command() -> str:
    configured = os.environ.get("RELAY_SHELL_TEST_INSPECTOR")
    if configured and Path(configured).exists():
        return configured
    local = NODE_MODULES / ".bin/mcp-inspector"
    if local.exists():
        return str(local)
    found = shutil.which("mcp-inspector")
    assert found, "MCP Inspector CLI missing: run scripts/test.sh, which installs it"
    return found


def inspect(tmp_path: Path, audit_path: Path, *args: str) -> tuple[int, Any, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env["HOME"] = str(tmp_path)  # the Inspector writes ~/.mcp-inspector/
    command = [
        inspector_command(),
        "--cli",
        "-e",
        f"RELAY_SHELL_AUDIT_PATH={audit_path}",
        "--format",
        "json",
        sys.executable,
        "-m",
        "relay_shell",
        *args,
    ]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    try:
        payload = json.loads(completed.stdout).get("result")
    except (json.JSONDecodeError, AttributeError):
        payload = None
    return completed.returncode, payload, completed.stdout + completed.stderr


TS_CLIENT = """
import {{ Client }} from "{sdk}/dist/esm/client/index.js";
import {{ StreamableHTTPClientTransport }} from "{sdk}/dist/esm/client/streamableHttp.js";
const [url, token] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {{
  requestInit: {{ headers: {{ Authorization: `Bearer ${{token}}` }} }},
}});
const client = new Client({{ name: "typescript-sdk", version: "1.0.0" }});
await client.connect(transport);
const listed = await client.listTools();
const called = await client.callTool({{ name: "shell_exec", arguments: {{ command: "echo from-typescript" }} }});
const denied = await client.callTool({{ name: "session_recv", arguments: {{ session_id: "s-000000000000" }} }});
console.log(JSON.stringify({{
  tools: listed.tools.map((tool) => tool.name),
  text: called.content[0].text,
  status: called.structuredContent.status,
  error: denied.isError,
  errorText: denied.content[0].text,
}}));
await transport.terminateSession();
await client.close();
"""


def typescript_sdk() -> Path:
    sdk = NODE_MODULES / "@modelcontextprotocol/sdk"
    assert sdk.exists(), "the TypeScript SDK is missing: run scripts/test.sh, which installs it"
    return sdk
