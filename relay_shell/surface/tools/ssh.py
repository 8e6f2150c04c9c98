"""MCP tools for SSH: schema + one call into the audited runner. The SSH code itself is imported on the first
call (each tool's `prepare`, and `SshAccess`), so these definitions cost the server's startup only their schemas."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Annotated, TypedDict, Unpack

from mcp_types import CallToolResult
from pydantic import Field

from relay_shell import results
from relay_shell.plan import Plan
from relay_shell.runner.request import CallRequest
from relay_shell.surface.registry import ToolKind, ToolRegistry
from relay_shell.surface.services import Services
from relay_shell.surface.tools.local import MaxOutput, Timeout, YieldAfter
from relay_shell.surface.tools.sessions import Cols, Rows, Until, WaitTimeout

if TYPE_CHECKING:
    from relay_shell.ssh.connection_args import ConnectionArgs

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
TransferTimeout = Annotated[
    float,
    Field(description="seconds for the whole transfer; clamped to the server's range", allow_inf_nan=False),
]


class SshConnection(TypedDict, total=False):
    """How to connect, where a tool takes it: the last five arguments of its inputSchema, in this order, each
    optional (default None: the inventory, ssh_config, then the server decide). A tool declares them as
    `**connection: Unpack[SshConnection]` (surface/build.py spells them out for the schema)."""

    user: User
    port: Port
    key_path: KeyPath
    known_hosts: KnownHosts
    jump: Jump


def connection_args(connection: SshConnection) -> ConnectionArgs:
    from relay_shell.ssh.connection_args import ConnectionArgs

    return ConnectionArgs(**connection)


async def ssh_exec(
    host: Host,
    command: Annotated[str, Field(description="the command, run by the remote user's login shell")],
    call: CallRequest,
    services: Services,
    timeout: Timeout = 60,
    max_output: MaxOutput = None,
    stdin: Annotated[str | None, Field(description="text written to the command's stdin, then EOF")] = None,
    merge_stderr: Annotated[bool, Field(description="interleave stderr into output (false: separate)")] = True,
    yield_after: YieldAfter = None,
    stdin_open: Annotated[
        bool, Field(description="keep stdin open (after `stdin`) for input sent to the job with session_send")
    ] = False,
    **connection: Unpack[SshConnection],
) -> Annotated[CallToolResult, results.SshExecResult]:
    """Run one command on one SSH host and return its exit status and output (the shell_exec of a remote
    host). Connections are pooled, so repeated calls to a host are fast.

    stdin gets EOF (a command reading it does not hang). On timeout the remote command and everything it
    started are killed and the partial output is returned after `[TIMEOUT after Ns]`. Connection problems
    come back as `[ERROR: Kind: …]` with Kind one of ConnectionRefused, Unreachable, UnknownHost,
    ConnectTimeout, AuthFailed, HostKeyMismatch, HostKeyUnknown. For many hosts use ssh_fanout.

    A long upgrade: set `timeout` for its whole life; still running after `yield_after` seconds, the call
    returns `[RUNNING: job ID after Ns | cursor C]` and the output so far; wait with
    session_recv(session_id=ID, until=…), end it with session_kill. A cut result names an output id that
    session_recv pages through.
    """

    def prepare() -> Plan:
        from relay_shell.ssh.exec_plan import prepare_exec

        return prepare_exec(
            services.ssh.get(),
            host=host,
            command=command,
            timeout=timeout,
            max_output=max_output,
            stdin=stdin,
            merge_stderr=merge_stderr,
            connection=connection_args(connection),
            jobs=services.jobs.start(call.job_owner, call.identity.client_id, yield_after, stdin_open),
        )

    return await services.runner.run(call, prepare, call.report_progress)


async def ssh_spawn(
    host: Host,
    call: CallRequest,
    services: Services,
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
    **connection: Unpack[SshConnection],
) -> Annotated[CallToolResult, results.SessionResult]:
    """Start an interactive terminal session on an SSH host and return its session_id with the first output.

    The session works exactly like a local one: drive it with session_send(until=…), read with
    session_recv, resize with session_resize, end with session_kill. Use it for remote REPLs, sudo
    prompts, pagers and TUIs; for single commands ssh_exec is simpler and cheaper.
    """

    def prepare() -> Plan:
        from relay_shell.ssh.exec_plan import prepare_spawn

        return prepare_spawn(
            services.ssh.get(),
            services.sessions,
            call.owner,
            call.identity.client_id,
            host=host,
            command=command,
            cols=cols,
            rows=rows,
            env=env,
            until=until,
            timeout=timeout,
            connection=connection_args(connection),
        )

    return await services.runner.run(call, prepare)


async def ssh_check(
    call: CallRequest,
    services: Services,
    hosts: Hosts = None,
    timeout: Annotated[float, Field(description="seconds per host", allow_inf_nan=False)] = 10,
    **connection: Unpack[SshConnection],
) -> Annotated[CallToolResult, results.FanoutResult]:
    """Check that hosts are reachable: connect, log in and run `true` on each (default: every inventory host).

    Per host: ok, unreachable (down, refused, timed out connecting), auth_failed, hostkey_rejected, denied
    (by policy) or timeout. Run it before ssh_fanout to see which hosts a change can reach.
    """

    def prepare() -> Plan:
        from relay_shell.ssh.fanout_plan import prepare_fanout

        return prepare_fanout(
            services.ssh.get(),
            command="true",
            hosts=hosts,
            timeout=timeout,
            concurrency=services.settings.ssh.fanout_max_concurrency,
            max_output_per_host=None,
            connection=connection_args(connection),
            check=True,
        )

    return await services.runner.run(call, prepare, call.report_progress)


async def ssh_fanout(
    command: Annotated[str, Field(description="the command to run on every host")],
    hosts: Hosts,
    call: CallRequest,
    services: Services,
    timeout: Annotated[float, Field(description="seconds per host", allow_inf_nan=False)] = 60,
    concurrency: Annotated[int, Field(description="hosts at once (like Ansible forks); capped by the server")] = 16,
    max_output_per_host: Annotated[
        int | None, Field(description="bytes of output kept per host (head + tail); default 8192")
    ] = None,
    **connection: Unpack[SshConnection],
) -> Annotated[CallToolResult, results.FanoutResult]:
    """Run one command on many hosts at once and return every host's result.

    The first line counts hosts by status — ok, failed (non-zero exit), unreachable, timeout, denied,
    auth_failed, hostkey_rejected — then one `=== host: status exit N Tms` block per host with its output.
    structuredContent has every host. Progress is reported as hosts finish. Try a canary host with ssh_exec
    first, then fan out in batches.
    """

    def prepare() -> Plan:
        from relay_shell.ssh.fanout_plan import prepare_fanout

        return prepare_fanout(
            services.ssh.get(),
            command=command,
            hosts=hosts,
            timeout=timeout,
            concurrency=concurrency,
            max_output_per_host=max_output_per_host,
            connection=connection_args(connection),
        )

    return await services.runner.run(call, prepare, call.report_progress)


async def ssh_keyscan(
    hosts: Hosts,
    call: CallRequest,
    services: Services,
    port: Port = None,
    key_types: Annotated[
        list[str] | None,
        Field(description="host key types, e.g. ssh-ed25519, ecdsa-sha2-nistp256, rsa-sha2-512; default: all"),
    ] = None,
    timeout: Annotated[float, Field(description="seconds per host", allow_inf_nan=False)] = 10,
) -> Annotated[CallToolResult, results.KeyscanResult]:
    """Fetch hosts' public host keys with their SHA-256 fingerprints and whether known_hosts already has them
    (known, changed, unknown). It never writes known_hosts: compare the fingerprints with a trusted source
    before adding them."""

    def prepare() -> Plan:
        from relay_shell.ssh.keyscan_plan import prepare_keyscan

        return prepare_keyscan(services.ssh.get(), hosts=hosts, port=port, key_types=key_types, timeout=timeout)

    return await services.runner.run(call, prepare)


async def ssh_hosts(call: CallRequest, services: Services) -> Annotated[CallToolResult, results.InventoryResult]:
    """List the SSH inventory: every host with its address, port, user, jump host and groups, from
    ~/.ssh/config and the inventory file (JSON, YAML or Ansible). Use the names or @group in other tools."""

    def prepare() -> Plan:
        from relay_shell.ssh.hosts_plan import prepare_hosts

        return prepare_hosts(services.ssh.get())

    return await services.runner.run(call, prepare)


async def ssh_upload(
    host: Host,
    local_path: Annotated[str, Field(description="file (or directory with recursive=true) on this machine")],
    remote_path: Annotated[
        str,
        Field(description="the path the copy gets on the host (not a directory to put it in); relative = home"),
    ],
    call: CallRequest,
    services: Services,
    recursive: Annotated[bool, Field(description="copy a directory tree (merged into an existing one)")] = False,
    timeout: TransferTimeout = 600,
    **connection: Unpack[SshConnection],
) -> Annotated[CallToolResult, results.TransferResult]:
    """Copy a file or a directory tree from this machine to an SSH host over SFTP, keeping mode bits and
    modification times. remote_path is the copy's own path: `local_path=/tmp/app.tar, remote_path=/srv/app.tar`
    (a directory already at remote_path is refused, not written into). With recursive=true a tree is merged
    into an existing directory; symlinks inside it are copied as symlinks, never followed.

    Files land under a temporary name and are renamed when complete, so the destination never holds half a
    file. The result lists each file with its bytes and SHA-256 (compare with `sha256sum` on the host); a
    timeout or failure says what arrived and what did not. Progress is reported in bytes. Larger than
    RELAY_SHELL_MAX_TRANSFER_BYTES is refused. For small text, ssh_exec with stdin is simpler.
    """

    def prepare() -> Plan:
        from relay_shell.ssh.transfers.plans import prepare_upload

        return prepare_upload(
            services.ssh.get(),
            host=host,
            local_path=local_path,
            remote_path=remote_path,
            recursive=recursive,
            timeout=timeout,
            connection=connection_args(connection),
        )

    return await services.runner.run(call, prepare, call.report_progress)


async def ssh_download(
    host: Host,
    remote_path: Annotated[str, Field(description="file (or directory with recursive=true) on the host")],
    local_path: Annotated[
        str, Field(description="the path the copy gets on this machine (not a directory to put it in)")
    ],
    call: CallRequest,
    services: Services,
    recursive: Annotated[bool, Field(description="copy a directory tree (merged into an existing one)")] = False,
    timeout: TransferTimeout = 600,
    **connection: Unpack[SshConnection],
) -> Annotated[CallToolResult, results.TransferResult]:
    """Copy a file or a directory tree from an SSH host to this machine, keeping mode bits and modification
    times: a large named file comes over the remote `scp -f` on the pooled connection, anything else over SFTP.
    local_path is the copy's own path: `remote_path=/var/log/syslog, local_path=/tmp/web01-syslog` (a
    directory already at local_path is refused, not written into). With recursive=true a tree is merged into
    an existing directory; symlinks inside it are copied as symlinks, never followed.

    Files land under a temporary name and are renamed when complete, so local_path never holds half a file.
    The result lists each file with its bytes and SHA-256; a timeout or failure says what arrived and what did
    not. Progress is reported in bytes. To look at a remote file, ssh_exec (head, tail, grep) is cheaper.
    """

    def prepare() -> Plan:
        from relay_shell.ssh.transfers.plans import prepare_download

        return prepare_download(
            services.ssh.get(),
            host=host,
            remote_path=remote_path,
            local_path=local_path,
            recursive=recursive,
            timeout=timeout,
            connection=connection_args(connection),
        )

    return await services.runner.run(call, prepare, call.report_progress)


async def ssh_forward(
    host: Host,
    spec: Annotated[
        str,
        Field(
            description="L:lport:dhost:dport (listen here, reach dhost:dport from the SSH host), "
            "R:rport:dhost:dport (listen on the SSH host, reach dhost:dport from here) or D:lport (SOCKS proxy "
            "here); port 0 picks a free port; IPv6 destination in brackets, e.g. L:0:[::1]:5432"
        ),
    ],
    call: CallRequest,
    services: Services,
    bind_address: Annotated[
        str,
        Field(
            description="address the listener binds (here for L and D, on the SSH host for R); default loopback "
            "only; any address other hosts can reach (0.0.0.0, a LAN address) is tier 2"
        ),
    ] = "127.0.0.1",
    **connection: Unpack[SshConnection],
) -> Annotated[CallToolResult, results.ForwardResult]:
    """Open an SSH port forward, like `ssh -L`, `ssh -R` or `ssh -D`. It stays open until ssh_forward_close,
    until you disconnect, until it has carried no connection for the operator's idle timeout (an hour by
    default), or until the SSH connection is lost. Use it to reach a service that only the SSH host can reach
    (a database on its loopback: L:0:127.0.0.1:5432, then connect to the returned local port with
    shell_exec), to let the SSH host reach a service here (R), or to browse its network through SOCKS (D:0,
    then `curl --socks5-hostname 127.0.0.1:PORT …`).

    Every R forward is tier 2 (guarded mode refuses it unless the operator allows it): anyone who can connect
    to its port on the SSH host reaches the destination from this machine, its loopback included. So is any
    listener bound to an address other hosts can reach.

    The result says the port the listener got (port 0 picks a free one), and its forward_id.
    ssh_forward_list shows each forward's bytes and connections. A destination refused by policy is refused
    under every spelling; a SOCKS destination is checked when a client names it. The number of forwards
    (one client may have half of them) and of connections they carry at once are limited.
    """

    def prepare() -> Plan:
        from relay_shell.ssh.forwards.plans import prepare_forward

        client_id = call.identity.client_id
        return prepare_forward(
            services.ssh.get(),
            services.ssh.forwards,
            call.owner,
            client_id,
            partial(services.runner.admit_later, "forward:refused", client_id),
            host=host,
            spec=spec,
            bind_address=bind_address,
            connection=connection_args(connection),
        )

    return await services.runner.run(call, prepare)


async def ssh_forward_list(
    call: CallRequest, services: Services
) -> Annotated[CallToolResult, results.ForwardListResult]:
    """List your open port forwards: id, spec with the actual port, where it listens, the destination, bytes
    moved each way and connections (open, failed, refused)."""

    def prepare() -> Plan:
        from relay_shell.ssh.forwards.plans import prepare_forward_list

        return prepare_forward_list(services.ssh.forwards, services.settings.limits.max_output, call.owner)

    return await services.runner.run(call, prepare)


async def ssh_forward_close(
    forward_id: Annotated[str, Field(description="the forward to close, as ssh_forward returned it (f-…)")],
    call: CallRequest,
    services: Services,
) -> Annotated[CallToolResult, results.ForwardResult]:
    """Close one of your port forwards: its listener stops and the connections it carries end. The result
    has what it carried in total."""

    def prepare() -> Plan:
        from relay_shell.ssh.forwards.plans import prepare_forward_close

        return prepare_forward_close(services.ssh.forwards, call.owner, forward_id=forward_id)

    return await services.runner.run(call, prepare)


REMOTE = ToolKind(read_only=False, destructive=True, idempotent=False, open_world=True)
PROBES = ToolKind(read_only=True, destructive=False, idempotent=True, open_world=True)
LISTS = ToolKind(read_only=True, destructive=False, idempotent=True, open_world=False)
# Both replace files at the destination; the same call again leaves the same result.
TRANSFERS = ToolKind(read_only=False, destructive=True, idempotent=True, open_world=True)
OPENS_A_FORWARD = ToolKind(read_only=False, destructive=False, idempotent=False, open_world=True)
CLOSES_A_FORWARD = ToolKind(read_only=False, destructive=True, idempotent=True, open_world=True)  # ends its connections


def register(tools: ToolRegistry) -> None:
    tools.add(ssh_exec, "Run a command over SSH", REMOTE)
    tools.add(ssh_spawn, "Start a remote terminal session", REMOTE)
    tools.add(ssh_check, "Check SSH reachability", PROBES)
    tools.add(ssh_fanout, "Run a command on many hosts", REMOTE)
    tools.add(ssh_keyscan, "Fetch SSH host keys", PROBES)
    tools.add(ssh_hosts, "List SSH hosts", LISTS)
    tools.add(ssh_upload, "Upload files over SFTP", TRANSFERS)
    tools.add(ssh_download, "Download files over SFTP or the remote scp", TRANSFERS)
    tools.add(ssh_forward, "Open an SSH port forward", OPENS_A_FORWARD)
    tools.add(ssh_forward_list, "List your port forwards", LISTS)
    tools.add(ssh_forward_close, "Close a port forward", CLOSES_A_FORWARD)
