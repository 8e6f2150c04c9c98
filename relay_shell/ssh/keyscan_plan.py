"""ssh_keyscan: fetch each host's keys with their fingerprints and known_hosts state; never writes known_hosts."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncssh

from relay_shell.arguments import call_limits
from relay_shell.capture import BoundedCapture
from relay_shell.errors import ArgumentError
from relay_shell.plan import Execution, Plan, ProgressFn, Subject
from relay_shell.ssh.connection_args import ConnectionArgs
from relay_shell.ssh.hosts_argument import expand_hosts
from relay_shell.ssh.state import Ssh
from relay_shell.ssh.target import Route, host_subject, target_record
from relay_shell.ssh.trust import trusted_keys

KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521", "rsa-sha2-512")


def prepare_keyscan(
    ssh: Ssh, *, hosts: str | list[str] | None, port: int | None, key_types: list[str] | None, timeout: float
) -> Plan:
    notes: list[str] = []
    names = expand_hosts(ssh, hosts, empty_means_all=False)
    types = _checked_key_types(key_types)
    timeout_value, _ = call_limits(ssh.settings, timeout, None, notes)
    connection = ConnectionArgs(port=port)
    routes = ssh.routes_of(names, connection)
    host_subjects = {name: host_subject(route, connection, fixed_tier=0) for name, route in routes.items()}

    gate = asyncio.Semaphore(ssh.settings.ssh.fanout_max_concurrency)

    async def scan(name: str, route: Route) -> dict[str, Any]:
        if name in plan.denied_hosts:
            return {"host": name, "status": "denied", "error": plan.denied_hosts[name], "keys": []}
        return await _scan_host(name, route, types, timeout_value, gate)

    async def execute(progress: ProgressFn) -> Execution:
        results = await asyncio.gather(*(scan(name, route) for name, route in routes.items()))
        body = BoundedCapture(ssh.settings.limits.max_output_hard)
        body.feed(_scan_text(results).encode())
        reached = sum(1 for result in results if result["status"] == "ok")
        summary = f"keyscan {len(results)} hosts: {reached} answered | known_hosts was not changed"
        return Execution(
            status="ok" if reached else "error",
            output=body.result(),
            # No host answered: an error, whose first line is [ERROR: …] like every error's.
            headline=f"[{summary}]" if reached else None,
            error=None if reached else f"NoHostReached: {summary}",
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


def _checked_key_types(key_types: list[str] | None) -> list[str]:
    types = list(key_types) if key_types else list(KEY_TYPES)
    for key_type in types:
        if key_type not in KEY_TYPES and key_type not in ("ssh-rsa", "rsa-sha2-256"):
            raise ArgumentError(
                f"key_types: {key_type!r} is not a host key type; allowed: {', '.join(KEY_TYPES)}, "
                "rsa-sha2-256, ssh-rsa"
            )
    return types


async def _scan_host(
    name: str, route: Route, types: list[str], timeout: float, gate: asyncio.Semaphore
) -> dict[str, Any]:
    """One host's keys of the given types, each with its fingerprint and its state in known_hosts."""
    target = route.target
    known = trusted_keys(target.known_hosts_files)
    listed = [
        key
        for spelling in (target.address, *target.spellings)
        for key in known.match(spelling, "", target.port if target.port != 22 else None)[0]
    ]
    keys: list[dict[str, Any]] = []
    errors: list[str] = []
    deadline = time.monotonic() + timeout  # for all key types of this host together
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


def _scan_text(results: list[dict[str, Any]]) -> str:
    """Per host a `=== host: status` line, then its keys as known_hosts lines with their fingerprints."""
    lines = []
    for result in results:
        lines.append(
            f"=== {result['host']}: {result['status']}" + (f" | {result['error']}" if "error" in result else "")
        )
        for key in result["keys"]:
            lines.append(f"{key['line']}  # {key['fingerprint']} ({key['known_hosts']})")
    return "\n".join(lines) + "\n"
