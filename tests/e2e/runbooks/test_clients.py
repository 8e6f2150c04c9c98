"""Runbooks with independent clients: the MCP Inspector CLI lists and gets a runbook prompt; the official
TypeScript SDK client, connected over stdio, receives `notifications/prompts/list_changed` when a runbook is added
and then sees the new prompt, and validates runbook_search's result against its outputSchema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT, read_records
from tests.e2e.clients.node import inspector_command, typescript_sdk
from tests.e2e.runbooks.helpers import LOADED, write_corpus


def inspect_runbooks(tmp_path: Path, runbooks: Path, *args: str) -> tuple[int, Any, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env["HOME"] = str(tmp_path)  # the Inspector writes ~/.mcp-inspector/
    settings = {
        "RELAY_SHELL_AUDIT_PATH": str(tmp_path / "audit.jsonl"),
        "RELAY_SHELL_RUNBOOK_DIR": str(runbooks),
        "XDG_CACHE_HOME": str(tmp_path / "cache"),
    }
    command = [inspector_command(), "--cli"]
    for name, value in settings.items():
        command += ["-e", f"{name}={value}"]
    command += ["--format", "json", sys.executable, "-m", "relay_shell", *args]
    completed = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, cwd=REPO_ROOT
    )
    try:
        payload = json.loads(completed.stdout).get("result")
    except (json.JSONDecodeError, AttributeError):
        payload = None
    return completed.returncode, payload, completed.stdout + completed.stderr


def test_the_inspector_lists_and_gets_a_runbook_prompt(tmp_path: Path) -> None:
    runbooks = write_corpus(tmp_path / "runbooks")
    code, payload, output = inspect_runbooks(tmp_path, runbooks, "--method", "prompts/list")
    assert code == 0, output
    listed = {prompt["name"]: prompt for prompt in payload["prompts"]}
    assert len([name for name in listed if "-" in name]) == LOADED
    assert listed["db-failover"]["description"].startswith("Promote a replica")
    assert [argument["name"] for argument in listed["db-failover"]["arguments"]] == ["host", "reason"]
    code, payload, output = inspect_runbooks(
        tmp_path,
        runbooks,
        "--method",
        "prompts/get",
        "--prompt-name",
        "db-failover",
        "--prompt-args",
        "host=db1",
    )
    assert code == 0, output
    text = payload["messages"][0]["content"]["text"]
    assert text.startswith("# Runbook: Fail over the database to a replica") and "| db1\n" in text
    assert "prompt:db-failover" in [record["tool"] for record in read_records(tmp_path / "audit.jsonl")]


TS_CLIENT = """
import {{ writeFileSync }} from "node:fs";
import {{ Client }} from "{sdk}/dist/esm/client/index.js";
import {{ StdioClientTransport }} from "{sdk}/dist/esm/client/stdio.js";
import {{ PromptListChangedNotificationSchema }} from "{sdk}/dist/esm/types.js";
const [python, directory, audit, cache] = process.argv.slice(2);
const transport = new StdioClientTransport({{
  command: python,
  args: ["-m", "relay_shell"],
  cwd: process.cwd(),
  env: {{ ...process.env, RELAY_SHELL_AUDIT_PATH: audit, RELAY_SHELL_RUNBOOK_DIR: directory, XDG_CACHE_HOME: cache }},
  stderr: "ignore",
}});
const client = new Client({{ name: "typescript-sdk", version: "1.0.0" }});
let announced;
const changed = new Promise((resolve) => {{ announced = resolve; }});
client.setNotificationHandler(PromptListChangedNotificationSchema, () => announced());
await client.connect(transport);
const capabilities = client.getServerCapabilities();
const before = (await client.listPrompts()).prompts.map((prompt) => prompt.name);
writeFileSync(`${{directory}}/from-typescript.md`, "---\\nsummary: Added while TypeScript listened.\\n---\\nBody.\\n");
const timer = setTimeout(() => {{ console.error("no prompts/list_changed within 20 s"); process.exit(3); }}, 20000);
await changed;
clearTimeout(timer);
const after = (await client.listPrompts()).prompts;
const added = after.find((prompt) => prompt.name === "from-typescript");
const fetched = await client.getPrompt({{ name: "from-typescript" }});
await client.listTools();  // the SDK compiles each tool's outputSchema, and checks every later result against it
const found = await client.callTool({{ name: "runbook_search", arguments: {{ tags: ["typescript"] }} }});
console.log(JSON.stringify({{
  searched: found.structuredContent.runbooks,
  listChanged: capabilities.prompts.listChanged,
  before: before.includes("from-typescript"),
  description: added && added.description,
  text: fetched.messages[0].content.text,
}}));
await client.close();
"""


def test_the_typescript_sdk_client_receives_prompts_list_changed(tmp_path: Path) -> None:
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "base.md").write_text("---\ntags: [base]\n---\nBase.\n")
    script = tmp_path / "client.mjs"
    script.write_text(TS_CLIENT.format(sdk=typescript_sdk()))
    done = subprocess.run(
        ["node", str(script), sys.executable, str(runbooks), str(tmp_path / "audit.jsonl"), str(tmp_path / "cache")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["listChanged"] is True and answer["before"] is False
    assert answer["description"] == "Added while TypeScript listened."
    assert answer["text"].endswith("Body.\n")
    # runbook_search's result, validated by the SDK against the typed entries of its outputSchema
    assert [(entry["name"], entry["shown"]) for entry in answer["searched"]] == [("from-typescript", "full")]
