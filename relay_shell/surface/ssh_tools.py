"""MCP tools for SSH: schema + one call into the audited runner. The SSH code itself is imported on the first
call (see `SshAccess`), so these definitions cost the server's startup only their schemas."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult
from pydantic import Field

from relay_shell.plan import Plan
from relay_shell.results import FanoutResult, InventoryResult, KeyscanResult, SessionResult, SshExecResult
from relay_shell.runner import Runner, identify
from relay_shell.sessions.owner import owner_of
from relay_shell.sessions.registry import SessionRegistry
from relay_shell.ssh.access import SshAccess
from relay_shell.surface.build import make_tool
from relay_shell.surface.local_tools import MaxOutput, Timeout
from relay_shell.surface.session_tools import Cols, Rows, Until, WaitTimeout

if TYPE_CHECKING:
    from relay_shell.ssh.commands import ConnectionArgs

Host = Annotated[
    str,
    Field(description="an inventory or ssh_config alias, host, user@host or user@host:port ([v6addr]:port)"),
]
Hosts = Annotated[
    str | list[str] | None,
    Field(description="hosts as a list or comma string: aliases, user@host:port, or @group (@all = every host)"),
]
User = Annotated[str | None, Field(description="remote user; default: inventory, ssh_config, then the local user")]
Port = Annotated[int | None, Field(description="port, 1 to 65535; default: inventory, ssh_config, then 22")]
KeyPath = Annotated[
    str | None, Field(description="private key file; default: inventory/ssh_config, agent, ~/.ssh keys")
]
KnownHosts = Annotated[
    str | None,
    Field(
        description="host-key mode: strict (known keys only), accept-new (trust a new host once; never a changed "
        "key), ignore (no check; tier 2, audited); default: inventory, ssh_config, then the server's"
    ),
]
Jump = Annotated[str | None, Field(description="jump hosts like ssh -J: host or user@host:port, comma-separated")]


def ssh_tools(runner: Runner, registry: SessionRegistry, access: SshAccess) -> list[Tool]:
    settings = runner.settings

    def connection(
        user: str | None, port: int | None, key_path: str | None, known_hosts: str | None, jump: str | None
    ) -> ConnectionArgs:
        from relay_shell.ssh.commands import ConnectionArgs

        return ConnectionArgs(user=user, port=port, key_path=key_path, known_hosts=known_hosts, jump=jump)

    async def ssh_exec(
        host: Host,
        command: Annotated[str, Field(description="the command, run by the remote user's login shell")],
        ctx: Context,
        timeout: Timeout = 60,
        max_output: MaxOutput = None,
        stdin: Annotated[str | None, Field(description="text written to the command's stdin, then EOF")] = None,
        merge_stderr: Annotated[bool, Field(description="interleave stderr into output (false: separate)")] = True,
        user: User = None,
        port: Port = None,
        key_path: KeyPath = None,
        known_hosts: KnownHosts = None,
        jump: Jump = None,
    ) -> Annotated[CallToolResult, SshExecResult]:
        """Run one command on one SSH host and return its exit status and output (the shell_exec of a remote
        host). Connections are pooled, so repeated calls to a host are fast.

        stdin gets EOF (a command reading it does not hang). On timeout the remote command and everything it
        started are killed and the partial output is returned after `[TIMEOUT after Ns]`. Connection problems
        come back as `[ERROR: Kind: …]` with Kind one of ConnectionRefused, Unreachable, UnknownHost,
        ConnectTimeout, AuthFailed, HostKeyMismatch, HostKeyUnknown. For many hosts use ssh_fanout.
        """

        def prepare() -> Plan:
            from relay_shell.ssh.commands import prepare_exec

            return prepare_exec(
                access.get(),
                host=host,
                command=command,
                timeout=timeout,
                max_output=max_output,
                stdin=stdin,
                merge_stderr=merge_stderr,
                connection=connection(user, port, key_path, known_hosts, jump),
            )

        return await runner.run(ctx.request_context, "ssh_exec", prepare, ctx.report_progress)

    async def ssh_spawn(
        host: Host,
        ctx: Context,
        command: Annotated[
            str | None, Field(description="program to run in the remote terminal; default: login shell")
        ] = None,
        cols: Cols = 120,
        rows: Rows = 40,
        env: Annotated[
            dict[str, str] | None, Field(description="variables to pass (sshd passes only what its AcceptEnv allows)")
        ] = None,
        until: Until = None,
        timeout: WaitTimeout = 5.0,
        user: User = None,
        port: Port = None,
        key_path: KeyPath = None,
        known_hosts: KnownHosts = None,
        jump: Jump = None,
    ) -> Annotated[CallToolResult, SessionResult]:
        """Start an interactive terminal session on an SSH host and return its session_id with the first output.

        The session works exactly like a local one: drive it with session_send(until=…), read with
        session_recv, resize with session_resize, end with session_kill. Use it for remote REPLs, sudo
        prompts, pagers and TUIs; for single commands ssh_exec is simpler and cheaper.
        """
        request_context = ctx.request_context

        def prepare() -> Plan:
            from relay_shell.ssh.commands import prepare_spawn

            return prepare_spawn(
                access.get(),
                registry,
                owner_of(request_context),
                identify(request_context, runner.transport).client_id,
                host=host,
                command=command,
                cols=cols,
                rows=rows,
                env=env,
                until=until,
                timeout=timeout,
                connection=connection(user, port, key_path, known_hosts, jump),
            )

        return await runner.run(request_context, "ssh_spawn", prepare)

    async def ssh_check(
        ctx: Context,
        hosts: Hosts = None,
        timeout: Annotated[float, Field(description="seconds per host", allow_inf_nan=False)] = 10,
        user: User = None,
        port: Port = None,
        key_path: KeyPath = None,
        known_hosts: KnownHosts = None,
        jump: Jump = None,
    ) -> Annotated[CallToolResult, FanoutResult]:
        """Check that hosts are reachable: connect, log in and run `true` on each (default: every inventory host).

        Per host: ok, unreachable (down, refused, timed out connecting), auth_failed, hostkey_rejected, denied
        (by policy) or timeout. Run it before ssh_fanout to see which hosts a change can reach.
        """

        def prepare() -> Plan:
            from relay_shell.ssh.commands import prepare_fanout

            return prepare_fanout(
                access.get(),
                command="true",
                hosts=hosts,
                timeout=timeout,
                concurrency=settings.fanout_max_concurrency,
                max_output_per_host=None,
                connection=connection(user, port, key_path, known_hosts, jump),
                check=True,
            )

        return await runner.run(ctx.request_context, "ssh_check", prepare, ctx.report_progress)

    async def ssh_fanout(
        command: Annotated[str, Field(description="the command to run on every host")],
        hosts: Hosts,
        ctx: Context,
        timeout: Annotated[float, Field(description="seconds per host", allow_inf_nan=False)] = 60,
        concurrency: Annotated[int, Field(description="hosts at once (like Ansible forks); capped by the server")] = 16,
        max_output_per_host: Annotated[
            int | None, Field(description="bytes of output kept per host (head + tail); default 8192")
        ] = None,
        user: User = None,
        port: Port = None,
        key_path: KeyPath = None,
        known_hosts: KnownHosts = None,
        jump: Jump = None,
    ) -> Annotated[CallToolResult, FanoutResult]:
        """Run one command on many hosts at once and return every host's result.

        The first line counts hosts by status — ok, failed (non-zero exit), unreachable, timeout, denied,
        auth_failed, hostkey_rejected — then one `=== host: status exit N Tms` block per host with its output.
        structuredContent has every host. Progress is reported as hosts finish. Try a canary host with ssh_exec
        first, then fan out in batches.
        """

        def prepare() -> Plan:
            from relay_shell.ssh.commands import prepare_fanout

            return prepare_fanout(
                access.get(),
                command=command,
                hosts=hosts,
                timeout=timeout,
                concurrency=concurrency,
                max_output_per_host=max_output_per_host,
                connection=connection(user, port, key_path, known_hosts, jump),
            )

        return await runner.run(ctx.request_context, "ssh_fanout", prepare, ctx.report_progress)

    async def ssh_keyscan(
        hosts: Hosts,
        ctx: Context,
        port: Port = None,
        key_types: Annotated[
            list[str] | None,
            Field(description="host key types, e.g. ssh-ed25519, ecdsa-sha2-nistp256, rsa-sha2-512; default: all"),
        ] = None,
        timeout: Annotated[float, Field(description="seconds per host", allow_inf_nan=False)] = 10,
    ) -> Annotated[CallToolResult, KeyscanResult]:
        """Fetch hosts' public host keys with their SHA-256 fingerprints and whether known_hosts already has them
        (known, changed, unknown). It never writes known_hosts: compare the fingerprints with a trusted source
        before adding them."""

        def prepare() -> Plan:
            from relay_shell.ssh.commands import prepare_keyscan

            return prepare_keyscan(access.get(), hosts=hosts, port=port, key_types=key_types, timeout=timeout)

        return await runner.run(ctx.request_context, "ssh_keyscan", prepare)

    async def ssh_hosts(ctx: Context) -> Annotated[CallToolResult, InventoryResult]:
        """List the SSH inventory: every host with its address, port, user, jump host and groups, from
        ~/.ssh/config and the inventory file (JSON, YAML or Ansible). Use the names or @group in other tools."""

        def prepare() -> Plan:
            from relay_shell.ssh.commands import prepare_hosts

            return prepare_hosts(access.get())

        return await runner.run(ctx.request_context, "ssh_hosts", prepare)

    remote = {"read_only": False, "destructive": True, "idempotent": False, "open_world": True}
    probes = {"read_only": True, "destructive": False, "idempotent": True, "open_world": True}
    return [
        make_tool(ssh_exec, "Run a command over SSH", **remote),
        make_tool(ssh_spawn, "Start a remote terminal session", **remote),
        make_tool(ssh_check, "Check SSH reachability", **probes),
        make_tool(ssh_fanout, "Run a command on many hosts", **remote),
        make_tool(ssh_keyscan, "Fetch SSH host keys", **probes),
        make_tool(ssh_hosts, "List SSH hosts", read_only=True, destructive=False, idempotent=True, open_world=False),
    ]
