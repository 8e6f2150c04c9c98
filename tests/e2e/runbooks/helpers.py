"""Shared by the runbook tests: a 40-file runbook corpus written by the test (priorities 1-10, arguments,
host scopes, one broken file), a stdio client on it, and what the tests read back."""

from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.stdio import StdioServerParameters
from mcp_types import TextContent

from tests.conftest import server_env

GUARDS = ("guard-primary-db", "guard-change-freeze")  # priority 10

LOADED = 39  # 40 files, one broken
HIDDEN_IN_READONLY = "deploy-rollout"  # `modes: [open, guarded]`
ABSENT = "deploy-rollbak"  # no file has this name
# Fields that differ between any two records (or name the request): left out when two refusals are compared.
VOLATILE_FIELDS = {"ts", "seq", "prev", "chain", "call_id", "request_id", "duration_ms"}


def as_if_hidden(record: dict[str, Any]) -> dict[str, Any]:
    """A refusal record about ABSENT, its volatile fields left out and ABSENT written as HIDDEN_IN_READONLY: what
    the record of the same request for the hidden runbook must be (issue 30: it answers as a name no file has)."""
    kept = {name: value for name, value in record.items() if name not in VOLATILE_FIELDS}
    return dict(json.loads(json.dumps(kept).replace(ABSENT, HIDDEN_IN_READONLY)))


def without_volatile(record: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in record.items() if name not in VOLATILE_FIELDS}


# A "billion laughs" in YAML front matter: 423 bytes whose aliases expand to 9**9 strings (gigabytes) if anything
# builds the value, here the priority an error message would quote.
ALIAS_BOMB = """\
---
a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
priority: *i
---
Boom.
"""
ANCHORS_REFUSED = "front matter: YAML anchors and aliases (&name, *name) are not allowed"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def write_corpus(directory: Path) -> Path:
    """40 runbook files: 2 guardrails (priority 10), 5 with arguments or host scopes or modes, 32 fillers with
    priorities 1 to 9, and one broken file."""
    write(
        directory / "guards" / "primary.md",
        """
        ---
        name: guard-primary-db
        title: Never restart the primary database in business hours
        priority: 10
        tags: [postgres, primary, database, guardrail]
        ---
        # The primary

        Never restart or fail over the primary database between 08:00 and 18:00 without the on-call DBA.
        """,
    )
    write(
        directory / "guards" / "freeze.md",
        """
        ---
        name: guard-change-freeze
        priority: 10
        tags: [freeze, release]
        ---
        No change to production during a declared change freeze: check the #changes channel first.
        """,
    )
    write(
        directory / "db" / "failover.md",
        """
        ---
        name: db-failover
        title: Fail over the database to a replica
        summary: Promote a replica when the primary is lost, then repoint the applications.
        priority: 9
        tags: [postgres, failover, replica, promote]
        hosts: ["@db"]
        arguments:
          - name: host
            description: the replica to promote
            required: true
          - name: reason
            description: why we fail over
        ---
        # Failover

        ## Check first
        Confirm the primary is really gone: `pg_isready -h PRIMARY`.

        ## Promote
        Run `pg_ctl promote` on the chosen replica.
        """,
    )
    write(
        directory / "db" / "restart-replica.md",
        """
        ---
        name: db-restart-replica
        summary: How to restart a postgres replica safely.
        priority: 7
        tags: [postgres, restart, replica]
        hosts: [db1, db2]
        arguments:
          - name: host
            description: the replica
            required: true
        ---
        # Restart a replica

        ## Check replication lag
        Lag must be under 10 s.

        ## Restart
        `systemctl restart postgresql`
        """,
    )
    write(
        directory / "edge" / "rotate-certs.md",
        """
        ---
        name: edge-rotate-certs
        title: Rotate certificates on the edge fleet
        priority: 8
        tags: [tls, certificates, edge]
        hosts: ["@edge"]
        arguments:
          - name: hosts
            description: the edge hosts, a comma list or @group
            required: false
        ---
        # Certificate rotation

        Rotate one host at a time; check `openssl s_client` after each.
        """,
    )
    write(
        directory / "nodes" / "drain.md",
        """
        ---
        name: node-drain
        summary: What to check before draining a node.
        priority: 6
        tags: [kubernetes, drain, node]
        ---
        # Before draining

        Check PodDisruptionBudgets and that the cluster has room.
        """,
    )
    write(
        directory / "deploy" / "rollout.md",
        """
        ---
        name: deploy-rollout
        summary: Roll out a release to the web tier in batches.
        priority: 5
        tags: [deploy, release, rollout]
        modes: [open, guarded]
        ---
        # Rollout

        Canary first, then batches of 10 %.
        """,
    )
    write(directory / "broken.md", "---\ntitle: Broken\ntags: [a, b\n---\nThe YAML above is not closed.\n")
    for index in range(FILLERS):
        write(
            directory / "misc" / f"note-{index:02d}.md",
            f"""
            ---
            name: note-{index:02d}
            title: Note {index} on subsystem {index % 5}
            priority: {1 + index % 9}
            tags: [note, subsystem{index % 5}]
            ---
            # Note {index}

            Background about subsystem {index % 5}. {"Restart it with care." if index % 4 == 0 else ""}
            """,
        )
    return directory


@asynccontextmanager
async def runbook_client(
    audit_path: Path,
    runbooks: Path,
    mode: str = "auto",
    on_message: Callable[[IncomingMessage], Awaitable[None]] | None = None,
    **settings: str,
) -> AsyncIterator[Client]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "relay_shell"], env=runbook_env(audit_path, runbooks, **settings)
    )
    async with Client(params, mode=mode, message_handler=on_message) as client:  # type: ignore[arg-type]
        yield client


def prompt_text(result: Any) -> str:
    content = result.messages[0].content
    assert isinstance(content, TextContent)
    return content.text


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Notifications:
    """list_changed notifications as a 2025-11-25 client receives them (its message handler)."""

    def __init__(self) -> None:
        self.methods: list[str] = []
        self.changed = anyio.Event()

    async def __call__(self, message: IncomingMessage) -> None:
        method = getattr(getattr(message, "root", message), "method", None)
        if isinstance(method, str) and method.endswith("list_changed"):
            self.methods.append(method)
            self.changed.set()

    async def wait(self, count: int) -> list[str]:
        """Until `count` notifications arrived in all (or WAIT seconds)."""
        with anyio.move_on_after(WAIT):
            while len(self.methods) < count:
                self.changed = anyio.Event()
                await self.changed.wait()
        return self.methods


async def reload_steps(connected: Client, books: Path, wait_for_change: Callable[[int], Awaitable[list[str]]]) -> None:
    """Edit, add and delete a file while connected: each is announced, and then the lists show it."""
    write(books / "one.md", "---\nsummary: The first version.\n---\nOne.\n")
    changed = await wait_for_change(1)
    assert "notifications/prompts/list_changed" in changed and "notifications/resources/list_changed" in changed
    prompts = {prompt.name: prompt for prompt in (await connected.list_prompts()).prompts}
    assert prompts["one"].description == "The first version."
    write(books / "one.md", "---\nsummary: The edited version.\ntags: [edited]\n---\nOne, edited.\n")
    await wait_for_change(2)
    prompts = {prompt.name: prompt for prompt in (await connected.list_prompts()).prompts}
    assert prompts["one"].description == "The edited version."
    assert "One, edited." in prompt_text(await connected.get_prompt("one"))
    resources = {str(resource.uri) for resource in (await connected.list_resources()).resources}
    assert "relay-shell://runbooks/one" in resources
    (books / "one.md").unlink()
    await wait_for_change(3)
    prompts_after = {prompt.name for prompt in (await connected.list_prompts()).prompts}
    resources_after = {str(resource.uri) for resource in (await connected.list_resources()).resources}
    assert "one" not in prompts_after and "relay-shell://runbooks/one" not in resources_after
    assert "base" in prompts_after


FILLERS = 32


WAIT = 20.0  # seconds a notification may take at most (the watcher scans every second); never reached normally


def runbook_env(audit_path: Path, runbooks: Path, **settings: str) -> dict[str, str]:
    """The server's environment: the runbook directory, and a private parse cache (not the user's)."""
    env = server_env(audit_path, runbook_dir=str(runbooks), **settings)
    env["XDG_CACHE_HOME"] = str(audit_path.parent / "cache")
    return env
