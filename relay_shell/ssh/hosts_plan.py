"""ssh_hosts and the inventory resources: the resolved inventory, groups and load problems, and how a call to
one host connects.
"""

from __future__ import annotations

from typing import Any

import orjson

from relay_shell.capture import BoundedCapture
from relay_shell.errors import ToolError
from relay_shell.plan import Execution, Plan, ProgressFn, Subject
from relay_shell.ssh.connection_args import ConnectionArgs
from relay_shell.ssh.state import Ssh
from relay_shell.ssh.target import target_record
from relay_shell.ssh.trust import trusted_keys


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
        body = BoundedCapture(ssh.settings.limits.max_output_hard)
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
