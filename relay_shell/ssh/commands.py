"""ssh_exec, ssh_spawn, ssh_check, ssh_fanout, ssh_keyscan, ssh_hosts: validate the arguments, resolve every
target into a full identity, and plan what runs. Policy sees each target in all its spellings (`Route`).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field, replace
from typing import Any

import asyncssh
import orjson

from relay_shell.capture import BoundedCapture, CapturedText
from relay_shell.config import Settings
from relay_shell.local.commands import MIN_OUTPUT, call_limits, check_no_nul, command_execution
from relay_shell.plan import ArgumentError, Execution, Plan, ProgressFn, ToolError
from relay_shell.policy.classify import Subject
from relay_shell.results import Outcome
from relay_shell.sessions.commands import TERM, check_size, spawn_plan, wait_timeout_for
from relay_shell.sessions.expect import compile_until
from relay_shell.sessions.registry import SessionRegistry
from relay_shell.ssh.inventory import Inventory, InventoryError
from relay_shell.ssh.pool import ConnectFailed, SshPool
from relay_shell.ssh.remote_exec import RemoteOutcome, open_channel, run_remote
from relay_shell.ssh.target import Route, key_fingerprint, resolve_route
from relay_shell.ssh.terminal import SshTerminal
from relay_shell.ssh.trust import trusted_keys

FANOUT_STATUSES = ("ok", "failed", "unreachable", "timeout", "denied", "auth_failed", "hostkey_rejected")
DEFAULT_PER_HOST_OUTPUT = 8192
MAX_CACHED_ROUTES = 4096
KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "rsa-sha2-512")


@dataclass(frozen=True)
class ConnectionArgs:
    user: str | None = None
    port: int | None = None
    key_path: str | None = None
    known_hosts: str | None = None
    jump: str | None = None


@dataclass
class Ssh:
    """What the SSH tools share: settings, the inventory and the connection pool."""

    settings: Settings
    inventory: Inventory
    pool: SshPool
    # Resolved routes for the current inventory load: resolving costs more than a warm exec.
    routes: dict[tuple[str, ConnectionArgs, str], Route] = field(default_factory=dict)
    routes_for: object = None

    def route(self, host: str, connection: ConnectionArgs, argument: str = "host") -> Route:
        hosts = self.inventory.hosts()  # the same object until the inventory reloads
        if hosts is not self.routes_for or len(self.routes) >= MAX_CACHED_ROUTES:
            self.routes.clear()
            self.routes_for = hosts
        key = (host, connection, argument)
        route = self.routes.get(key)
        hops = (*route.jumps, route.target) if route is not None else ()
        if route is None or any(hop.key_path and not os.path.isfile(hop.key_path) for hop in hops):
            route = self.routes[key] = self._resolve(host, connection, argument)  # a key gone: say so again
        return route

    def _resolve(self, host: str, connection: ConnectionArgs, argument: str) -> Route:
        if argument == "host" and host.strip().startswith("@"):
            raise ArgumentError(
                f"host: {host!r} is a group and this tool takes one host; allowed: one host, or ssh_fanout / "
                "ssh_check for a group"
            )
        if connection.user is not None and not connection.user.strip():
            raise ArgumentError("user: is empty; allowed: a user name, or omit it")
        route = resolve_route(
            self.inventory,
            host,
            user=connection.user,
            port=connection.port,
            key_path=connection.key_path,
            known_hosts=connection.known_hosts,
            jump=connection.jump,
            default_mode=self.settings.ssh_known_hosts,
            argument=argument,
        )
        if self.settings.policy_mode == "readonly":
            # Trusting a new host key writes known_hosts: a change readonly mode does not make.
            hops = tuple(
                replace(hop, known_hosts_mode="strict") if hop.known_hosts_mode == "accept-new" else hop
                for hop in (*route.jumps, route.target)
            )
            route = replace(route, jumps=hops[:-1], target=hops[-1])
        return route


def target_record(route: Route) -> dict[str, Any]:
    """The SSH identity for the audit record: where, as whom, with which key, through which hops, how trusted."""
    target = route.target
    record: dict[str, Any] = {
        "host": target.name,
        "address": target.address,
        "port": target.port,
        "user": target.user,
        "key": key_fingerprint(target.key_path) if target.key_path else "default (agent and ~/.ssh keys)",
        "host_key_mode": target.known_hosts_mode,
    }
    if route.jumps:
        record["jump"] = [hop.describe() for hop in route.jumps]
    # ssh_config's ProxyCommand runs a local command: the record names it, for the target or the first hop.
    proxy_commands = [hop.proxy_command for hop in (*route.jumps, target) if hop.proxy_command]
    if proxy_commands:
        record["proxy_command"] = proxy_commands[0]
    return record


def _subject(route: Route, connection: ConnectionArgs, **texts: Any) -> Subject:
    return Subject(
        hosts=route.spellings,
        unverified_host_key=connection.known_hosts == "ignore",
        **texts,
    )


def _command_text(command: str) -> str:
    if not command.strip():
        raise ArgumentError("command: is empty; allowed: a non-empty command")
    check_no_nul("command", command)
    return command


# -- ssh_exec ----------------------------------------------------------------------------------------------


def prepare_exec(
    ssh: Ssh,
    *,
    host: str,
    command: str,
    timeout: float,
    max_output: int | None,
    stdin: str | None,
    merge_stderr: bool,
    connection: ConnectionArgs,
) -> Plan:
    notes: list[str] = []
    command = _command_text(command)
    route = ssh.route(host, connection)
    timeout_value, budget = call_limits(ssh.settings, timeout, max_output, notes)
    stdin_bytes = None
    if stdin is not None:
        check_no_nul("stdin", stdin)
        stdin_bytes = stdin.encode("utf-8", errors="surrogateescape")
    target = target_record(route)

    async def execute(progress: ProgressFn) -> Execution:
        outcome = await run_remote(
            ssh.pool,
            route,
            command,
            stdin=stdin_bytes,
            timeout=timeout_value,
            budget=budget,
            merge_stderr=merge_stderr,
            progress=progress,
        )
        _note_trust(outcome, route, target, notes)
        return command_execution(outcome, {"host": route.target.name, "host_key": outcome.host_key})

    return Plan(
        subject=_subject(route, connection, command=command, stdin=stdin),
        execute=execute,
        notes=notes,
        timeout=timeout_value,
        target=target,
    )


def _note_trust(outcome: RemoteOutcome, route: Route, target: dict[str, Any], notes: list[str]) -> None:
    target["host_key"] = outcome.host_key
    if outcome.accepted_new_key:
        notes.append(
            f"host key {outcome.host_key} of {route.target.address}:{route.target.port} was not known and is now "
            "trusted (accept-new); it was added to known_hosts"
        )


# -- ssh_spawn ---------------------------------------------------------------------------------------------


def prepare_spawn(
    ssh: Ssh,
    registry: SessionRegistry,
    owner: str,
    client_id: str,
    *,
    host: str,
    command: str | None,
    cols: int,
    rows: int,
    env: dict[str, str] | None,
    until: str | list[str] | None,
    timeout: float,
    connection: ConnectionArgs,
) -> Plan:
    notes: list[str] = []
    if command is not None:
        command = _command_text(command)
    route = ssh.route(host, connection)
    check_size(cols, rows)
    patterns = compile_until(until)
    wait_timeout = wait_timeout_for(ssh.settings, timeout, notes)
    for name, value in (env or {}).items():
        if not name or "=" in name or "\x00" in name:
            raise ArgumentError(f"env: {name!r} is not a valid variable name; allowed: a non-empty name without '='")
        check_no_nul(f"env.{name}", value)
    target = target_record(route)
    shown = f"{route.target.describe()}: {command or 'login shell'}"

    async def open_terminal() -> SshTerminal:
        connect_timeout = ssh.settings.ssh_connect_timeout * (1 + len(route.jumps))
        try:
            pooled = await ssh.pool.acquire(route, connect_timeout)
        except TimeoutError:
            raise ToolError("ConnectTimeout", f"{route.target.describe()}: no connection in time") from None
        terminal = SshTerminal(ssh.pool, pooled, route.target.describe())
        try:
            # sshd passes only the variables its AcceptEnv allows; TERM travels with the terminal request.
            deadline = time.monotonic() + ssh.settings.ssh_connect_timeout
            await open_channel(ssh.pool, pooled, deadline, lambda: terminal.open(command, TERM, cols, rows, env or {}))
        except BaseException as exc:
            ssh.pool.release(pooled)
            if isinstance(exc, asyncssh.ChannelOpenError):
                raise ToolError("ChannelRefused", f"{route.target.describe()}: {exc.reason}") from None
            raise
        target["host_key"] = pooled.host_key
        if pooled.decision.announce_new_key():
            notes.append(f"host key {pooled.host_key} was not known and is now trusted (accept-new)")
        return terminal

    plan = spawn_plan(
        ssh.settings,
        registry,
        owner,
        client_id,
        _subject(route, connection, command=command, env=tuple((env or {}).items())),
        shown,
        cols,
        rows,
        patterns,
        wait_timeout,
        notes,
        open_terminal,
        target,
    )
    return plan


# -- ssh_check and ssh_fanout ------------------------------------------------------------------------------


def expand_hosts(ssh: Ssh, hosts: str | list[str] | None, *, empty_means_all: bool) -> list[str]:
    """Host arguments in order, without repeats: names, user@host:port, and @group (the inventory's groups;
    @all is every host)."""
    if hosts is None:
        items: list[str] = []
    elif isinstance(hosts, str):
        items = [item.strip() for item in hosts.split(",")]
    else:
        items = [item.strip() for item in hosts]
    items = [item for item in items if item]
    if not items:
        if not empty_means_all:
            raise ArgumentError(
                "hosts: is empty; allowed: host names, user@host:port or @group, as a list or comma string"
            )
        items = ["@all"]
    expanded: list[str] = []
    for item in items:
        if item.startswith("@"):
            try:
                expanded += ssh.inventory.group_members(item[1:])
            except InventoryError as exc:
                raise ArgumentError(f"hosts: {exc}") from None
        else:
            expanded.append(item)
    expanded = list(dict.fromkeys(expanded))
    if not expanded:
        raise ArgumentError(
            "hosts: the inventory has no hosts; allowed: name hosts explicitly, or configure "
            "RELAY_SHELL_INVENTORY / ~/.ssh/config"
        )
    limit = ssh.settings.fanout_max_hosts
    if len(expanded) > limit:
        raise ArgumentError(
            f"hosts: {len(expanded)} hosts; allowed: at most {limit} per call (RELAY_SHELL_FANOUT_MAX_HOSTS); "
            "split the work into batches"
        )
    return expanded


@dataclass
class HostResult:
    name: str
    status: str
    duration_ms: int = 0
    exit_code: int | None = None
    signal: str | None = None
    output: CapturedText | None = None
    error: str | None = None
    target: dict[str, Any] | None = None
    host_key: str | None = None

    def fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"host": self.name, "status": self.status, "duration_ms": self.duration_ms}
        if self.exit_code is not None:
            fields["exit_code"] = self.exit_code
        if self.signal is not None:
            fields["signal"] = self.signal
        if self.output is not None:
            fields["output"] = self.output.text
            fields["output_bytes"] = self.output.produced_bytes
            fields["output_sha256"] = self.output.sha256
            fields["truncated"] = self.output.truncated
        if self.error is not None:
            fields["error"] = self.error
        return fields


def prepare_fanout(
    ssh: Ssh,
    *,
    command: str,
    hosts: str | list[str] | None,
    timeout: float,
    concurrency: int,
    max_output_per_host: int | None,
    connection: ConnectionArgs,
    check: bool = False,
) -> Plan:
    """ssh_fanout (and ssh_check, `check=True`: connect and run `true`)."""
    notes: list[str] = []
    settings = ssh.settings
    if not check:
        command = _command_text(command)
    names = expand_hosts(ssh, hosts, empty_means_all=check)
    if concurrency < 1:
        raise ArgumentError(f"concurrency: {concurrency} is too small; allowed: 1 to {settings.fanout_max_concurrency}")
    if concurrency > settings.fanout_max_concurrency:
        notes.append(
            f"concurrency {concurrency} lowered to {settings.fanout_max_concurrency} "
            "(RELAY_SHELL_FANOUT_MAX_CONCURRENCY)"
        )
        concurrency = settings.fanout_max_concurrency
    timeout_value, budget = call_limits(
        settings, timeout, DEFAULT_PER_HOST_OUTPUT if max_output_per_host is None else max_output_per_host, notes
    )
    share = max(MIN_OUTPUT, settings.max_output_hard // len(names))
    if budget > share:
        # The whole result (every host's output, in text and structuredContent) stays within the hard cap.
        notes.append(
            f"max_output_per_host {budget} lowered to {share} for {len(names)} hosts "
            f"(RELAY_SHELL_MAX_OUTPUT_HARD={settings.max_output_hard} in all)"
        )
        budget = share
    routes: dict[str, Route] = {}
    for name in names:
        routes[name] = ssh.route(name, connection, argument="hosts")
    host_subjects = {
        name: _subject(route, connection, command=None if check else command, fixed_tier=0 if check else None)
        for name, route in routes.items()
    }
    targets = {name: target_record(route) for name, route in routes.items()}

    async def execute(progress: ProgressFn) -> Execution:
        started = time.monotonic()
        results: dict[str, HostResult] = {}
        gate = asyncio.Semaphore(concurrency)
        done = 0

        async def one(name: str) -> None:
            nonlocal done
            async with gate:
                results[name] = await _run_one(ssh, name, routes[name], command, timeout_value, budget, check, plan)
            results[name].target = targets[name]
            done += 1
            await progress(done)

        await asyncio.gather(*(one(name) for name in names))
        ordered = [results[name] for name in names]
        for result in ordered:
            targets[result.name]["status"] = result.status
            if result.host_key is not None:
                targets[result.name]["host_key"] = result.host_key
        return _fanout_execution(ordered, settings.max_output_hard, time.monotonic() - started, check)

    plan = Plan(
        subject=Subject(command=None if check else command, fixed_tier=0 if check else None),
        execute=execute,
        notes=notes,
        timeout=timeout_value,
        target={"hosts": list(targets.values())},
        host_subjects=host_subjects,
        progress_total=len(names),
        progress_unit="hosts done",
    )
    return plan


async def _run_one(
    ssh: Ssh, name: str, route: Route, command: str, timeout: float, budget: int, check: bool, plan: Plan
) -> HostResult:
    started = time.monotonic()
    denied = plan.denied_hosts.get(name)
    if denied is not None:
        return HostResult(name, "denied", error=denied)
    try:
        outcome = await run_remote(
            ssh.pool,
            route,
            "true" if check else command,
            stdin=None,
            timeout=timeout,
            budget=budget,
            merge_stderr=True,
            progress=None,
        )
    except ConnectFailed as exc:
        status = exc.status if exc.status in FANOUT_STATUSES else "unreachable"
        return HostResult(name, status, _ms(started), error=f"{exc.kind}: {exc}")
    except ToolError as exc:
        return HostResult(name, "unreachable", _ms(started), error=f"{exc.kind}: {exc}")
    except Exception as exc:  # one host's surprise must not cost the other hosts their results
        return HostResult(name, "unreachable", _ms(started), error=f"{type(exc).__name__}: {exc}"[:300])
    if outcome.timed_out:
        status = "timeout"
    elif outcome.exit_code == 0:
        status = "ok"
    else:
        status = "failed"
    return HostResult(
        name,
        status,
        _ms(started),
        exit_code=outcome.exit_code,
        signal=outcome.signal,
        output=None if check else outcome.stdout,
        error=f"TIMEOUT after {timeout:g}s" if outcome.timed_out else None,
        host_key=outcome.host_key,
    )


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _fanout_execution(results: list[HostResult], budget: int, elapsed: float, check: bool) -> Execution:
    counts = {status: 0 for status in FANOUT_STATUSES}
    for result in results:
        counts[result.status] += 1
    summary = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
    what = "check" if check else "fanout"
    headline = f"[{what} {len(results)} hosts: {summary} | {elapsed:.1f}s]"
    lines: list[str] = []
    for result in results:
        detail = result.status
        if result.exit_code is not None and not (check and result.status == "ok"):
            detail += f" exit {result.exit_code}"
        if result.signal is not None:
            detail += f" signal {result.signal}"
        detail += f" {result.duration_ms}ms"
        if result.error:
            detail += f" | {result.error}"
        lines.append(f"=== {result.name}: {detail}")
        if result.output is not None and result.output.text:
            lines.append(result.output.text.rstrip("\n"))
            if result.output.truncated:
                lines.append(
                    f"[TRUNCATED: {result.output.produced_bytes} bytes produced, {result.output.shown_bytes} shown]"
                )
    body = BoundedCapture(budget)
    body.feed(("\n".join(lines) + "\n").encode("utf-8", errors="surrogateescape"))
    ran = counts["ok"] + counts["failed"] + counts["timeout"]
    status: Outcome
    if counts["ok"] == len(results):
        status = "ok"
    elif counts["denied"] == len(results):
        status = "denied"
    elif ran == 0:
        status = "error"
    else:
        status = "exit_nonzero"
    return Execution(
        status=status,
        output=body.result(),
        headline=headline,
        error=None if status != "error" else f"NoHostReached: {summary}",
        fields={"hosts": [result.fields() for result in results], "summary": counts},
    )


# -- ssh_keyscan -------------------------------------------------------------------------------------------


def prepare_keyscan(
    ssh: Ssh, *, hosts: str | list[str] | None, port: int | None, key_types: list[str] | None, timeout: float
) -> Plan:
    notes: list[str] = []
    names = expand_hosts(ssh, hosts, empty_means_all=False)
    types = list(key_types) if key_types else list(KEY_TYPES)
    for key_type in types:
        if key_type not in KEY_TYPES and key_type not in ("ssh-rsa", "rsa-sha2-256"):
            raise ArgumentError(
                f"key_types: {key_type!r} is not a host key type; allowed: {', '.join(KEY_TYPES)}, "
                "rsa-sha2-256, ssh-rsa"
            )
    timeout_value, _ = call_limits(ssh.settings, timeout, None, notes)
    connection = ConnectionArgs(port=port)
    routes = {name: ssh.route(name, connection, argument="hosts") for name in names}
    host_subjects = {name: _subject(route, connection, fixed_tier=0) for name, route in routes.items()}

    gate = asyncio.Semaphore(ssh.settings.fanout_max_concurrency)

    async def scan(name: str, route: Route) -> dict[str, Any]:
        if name in plan.denied_hosts:
            return {"host": name, "status": "denied", "error": plan.denied_hosts[name], "keys": []}
        target = route.target
        known = trusted_keys(target.known_hosts_files)
        listed = [
            key
            for spelling in (target.address, *target.spellings)
            for key in known.match(spelling, "", target.port if target.port != 22 else None)[0]
        ]
        keys: list[dict[str, Any]] = []
        errors: list[str] = []
        deadline = time.monotonic() + timeout_value  # for all key types of this host together
        for key_type in types:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                errors.append(f"{key_type}: no time left")
                break
            try:
                async with gate:
                    key = await asyncio.wait_for(
                        asyncssh.get_server_host_key(
                            target.address, target.port, server_host_key_algs=[key_type], config=None
                        ),
                        remaining,
                    )
            except (OSError, TimeoutError) as exc:  # the host does not answer: other key types will not either
                errors.append(f"{type(exc).__name__}: {exc}")
                break
            except Exception as exc:
                errors.append(f"{key_type}: {type(exc).__name__}: {exc}")
                continue
            if key is None:
                continue
            pattern = target.address if target.port == 22 else f"[{target.address}]:{target.port}"
            line = f"{pattern} {' '.join(key.export_public_key('openssh').decode().split()[:2])}"
            state = "known" if key in listed else ("changed" if listed else "unknown")
            keys.append(
                {
                    "type": key.get_algorithm(),
                    "fingerprint": key.get_fingerprint("sha256"),
                    "known_hosts": state,
                    "line": line,
                }
            )
        status = "ok" if keys else "unreachable"
        unique = list({item["line"]: item for item in keys}.values())
        return {
            "host": name,
            "status": status,
            "keys": unique,
            **({"error": "; ".join(errors[:3])} if not keys else {}),
        }

    async def execute(progress: ProgressFn) -> Execution:
        results = await asyncio.gather(*(scan(name, route) for name, route in routes.items()))
        lines = []
        for result in results:
            lines.append(
                f"=== {result['host']}: {result['status']}" + (f" | {result['error']}" if "error" in result else "")
            )
            for key in result["keys"]:
                lines.append(f"{key['line']}  # {key['fingerprint']} ({key['known_hosts']})")
        body = BoundedCapture(ssh.settings.max_output_hard)
        body.feed(("\n".join(lines) + "\n").encode())
        reached = sum(1 for result in results if result["status"] == "ok")
        return Execution(
            status="ok" if reached else "error",
            output=body.result(),
            headline=f"[keyscan {len(results)} hosts: {reached} answered | known_hosts was not changed]",
            error=None if reached else "NoHostReached: no host answered with a host key",
            fields={"hosts": list(results)},
        )

    plan = Plan(
        subject=Subject(fixed_tier=0),
        execute=execute,
        notes=notes,
        timeout=timeout_value,
        target={"hosts": [target_record(route) for route in routes.values()]},
        host_subjects=host_subjects,
    )
    return plan


# -- ssh_hosts and the inventory resources -----------------------------------------------------------------


def inventory_view(ssh: Ssh) -> dict[str, Any]:
    inventory = ssh.inventory
    hosts = []
    for entry in inventory.hosts().values():
        hosts.append(
            {
                "name": entry.name,
                "hostname": entry.hostname or entry.name,
                "port": entry.port or 22,
                "user": entry.user,
                "key_path": entry.key_path,
                "jump": entry.jump,
                "known_hosts": entry.known_hosts,
                "groups": list(entry.groups),
                "source": entry.source,
            }
        )
    return {
        "hosts": hosts,
        "groups": {name: list(members) for name, members in inventory.groups().items()},
        "problems": inventory.problems(),
        "files": [str(path) for path in inventory.files()],
    }


def prepare_hosts(ssh: Ssh) -> Plan:
    async def execute(progress: ProgressFn) -> Execution:
        view = inventory_view(ssh)
        lines = [f"{len(view['hosts'])} hosts, {len(view['groups'])} groups"]
        for host in view["hosts"]:
            where = f"{host['user'] + '@' if host['user'] else ''}{host['hostname']}:{host['port']}"
            extra = f" via {host['jump']}" if host["jump"] else ""
            groups = f" [{', '.join(host['groups'])}]" if host["groups"] else ""
            lines.append(f"{host['name']}  {where}{extra}{groups}  ({host['source']})")
        for problem in view["problems"]:
            lines.append(f"[PROBLEM: {problem}]")
        body = BoundedCapture(ssh.settings.max_output_hard)
        body.feed(("\n".join(lines) + "\n").encode())
        return Execution(status="ok", output=body.result(), fields={"inventory": view})

    return Plan(subject=Subject(fixed_tier=0), execute=execute)


def host_view(ssh: Ssh, name: str) -> str:
    """relay-shell://inventory/{host}: how a call to this host would connect, fully resolved."""
    try:
        route = ssh.route(name, ConnectionArgs())
    except ToolError as exc:
        return orjson.dumps({"host": name, "error": str(exc)}).decode()
    entry = ssh.inventory.lookup(name)
    target = route.target
    known = trusted_keys(target.known_hosts_files)
    listed = known.match(target.address, "", target.port if target.port != 22 else None)
    view = {
        **target_record(route),
        "groups": list(entry.groups) if entry else [],
        "source": entry.source if entry else "not in the inventory (a plain host name)",
        "known_hosts_files": list(target.known_hosts_files),
        "host_key_known": bool(listed[0]),
    }
    return orjson.dumps(view, option=orjson.OPT_INDENT_2).decode()
