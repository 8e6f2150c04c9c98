"""The `hosts` argument of the fleet tools expanded: a list or a comma string of names, user@host:port and
@groups (the inventory's groups; @all is every host), in order, without repeats, within FANOUT_MAX_HOSTS."""

from __future__ import annotations

from relay_shell.errors import ArgumentError
from relay_shell.ssh.inventory.fields import InventoryError
from relay_shell.ssh.state import Ssh


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
    limit = ssh.settings.ssh.fanout_max_hosts
    if len(expanded) > limit:
        raise ArgumentError(
            f"hosts: {len(expanded)} hosts; allowed: at most {limit} per call (RELAY_SHELL_FANOUT_MAX_HOSTS); "
            "split the work into batches"
        )
    return expanded
