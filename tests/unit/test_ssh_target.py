"""Target parsing, IP spellings, route resolution and policy on SSH targets (no network needed)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from relay_shell.errors import ArgumentError
from relay_shell.plan import Subject
from relay_shell.policy.admission import Policy
from relay_shell.ssh.inventory.load import Inventory
from relay_shell.ssh.target import HostSpec, canonical_host, host_spellings, parse_host_spec, resolve_route


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("web1", HostSpec(None, "web1", None)),
        ("deploy@web1", HostSpec("deploy", "web1", None)),
        ("deploy@web1:2222", HostSpec("deploy", "web1", 2222)),
        ("10.0.0.5:22", HostSpec(None, "10.0.0.5", 22)),
        ("::1", HostSpec(None, "::1", None)),
        ("[::1]:2200", HostSpec(None, "::1", 2200)),
        ("root@[fe80::1%eth0]:22", HostSpec("root", "fe80::1%eth0", 22)),
        ("DOMAIN\\user@host", HostSpec("DOMAIN\\user", "host", None)),
    ],
)
def test_host_spec_parses(text: str, expected: HostSpec) -> None:
    assert parse_host_spec("host", text) == expected


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "is empty"),
        ("web 1", "malformed"),
        ("-oProxyCommand=sh", "malformed"),
        ("root@@web1", "not a valid user name"),
        ("web1:0", "out of range"),
        ("web1:70000", "out of range"),
        ("web1:ssh", "out of range"),
        ("[::1", "without ']'"),
        ("[::1]x", "text after ']'"),
        ("we$b", "not a valid host name"),
    ],
)
def test_bad_host_spec_names_the_argument(text: str, problem: str) -> None:
    with pytest.raises(ArgumentError) as raised:
        parse_host_spec("host", text)
    assert str(raised.value).startswith("host: ")
    assert problem in str(raised.value)


@pytest.mark.parametrize(
    "spelling",
    ["127.0.0.5", "2130706437", "0x7f000005", "0177.0.0.5", "127.5", "127.0.5", "::ffff:127.0.0.5", "::127.0.0.5"],
)
def test_every_ipv4_spelling_has_the_dotted_quad(spelling: str) -> None:
    assert "127.0.0.5" in host_spellings(spelling)


def test_ipv6_spellings_are_canonical() -> None:
    spellings = host_spellings("[2001:DB8:0:0::1]")
    assert "2001:db8::1" in spellings
    assert "2001:0db8:0000:0000:0000:0000:0000:0001" in spellings
    assert host_spellings("Web1.Example.COM.") == ["web1.example.com"]


def _inventory(tmp_path: Path, ssh_config: str, inventory: str | None = None) -> Inventory:
    config = tmp_path / "ssh_config"
    config.write_text(ssh_config)
    key = tmp_path / "id_test"
    key.write_text("not a real key\n")
    inventory_path = None
    if inventory is not None:
        inventory_path = tmp_path / "hosts.ini"
        inventory_path.write_text(inventory)
    return Inventory(config, inventory_path)


def test_route_takes_arguments_then_inventory_then_ssh_config(tmp_path: Path) -> None:
    inventory = _inventory(
        tmp_path,
        f"Host db1\n  HostName 10.1.0.7\n  Port 2201\n  User admin\n  IdentityFile {tmp_path}/id_test\n"
        "  StrictHostKeyChecking yes\n  ProxyJump bastion\nHost bastion\n  HostName 10.1.0.1\n  User jump\n",
        "[web]\nweb1 ansible_host=10.2.0.1 ansible_user=deploy\n",
    )
    route = resolve_route(
        inventory, "db1", user=None, port=None, key_path=None, known_hosts=None, jump=None, default_mode="accept-new"
    )
    target = route.target
    assert (target.address, target.port, target.user) == ("10.1.0.7", 2201, "admin")
    assert target.key_path == f"{tmp_path}/id_test"
    assert target.known_hosts_mode == "strict"  # StrictHostKeyChecking yes
    assert [hop.address for hop in route.jumps] == ["10.1.0.1"]
    assert route.jumps[0].user == "jump"
    assert {"db1", "10.1.0.7", "bastion", "10.1.0.1"} <= set(route.spellings)
    shouted = resolve_route(
        inventory, "DB1", user=None, port=None, key_path=None, known_hosts=None, jump=None, default_mode="accept-new"
    )
    assert (shouted.target.address, shouted.target.port) == ("10.1.0.7", 2201)  # ssh lowercases, so do we

    explicit = resolve_route(
        inventory,
        "other@db1:2222",
        user="ignored",
        port=None,
        key_path=None,
        known_hosts="accept-new",
        jump="none",
        default_mode="strict",
    )
    assert (explicit.target.user, explicit.target.port, explicit.target.known_hosts_mode) == (
        "other",
        2222,
        "accept-new",
    )
    assert explicit.jumps == ()

    web = resolve_route(
        inventory, "web1", user=None, port=None, key_path=None, known_hosts=None, jump=None, default_mode="accept-new"
    )
    assert (web.target.address, web.target.user, web.target.port) == ("10.2.0.1", "deploy", 22)


def test_route_bad_input(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, "Host a\n  HostName 10.0.0.1\n")

    def route(host: str, **overrides: object) -> None:
        arguments: dict[str, object] = {"user": None, "port": None, "key_path": None, "known_hosts": None, "jump": None}
        arguments.update(overrides)
        resolve_route(inventory, host, default_mode="accept-new", **arguments)  # type: ignore[arg-type]

    for host, overrides, problem in [
        ("a", {"port": 0}, "port: port 0 is out of range"),
        ("a", {"port": 70000}, "port: port 70000 is out of range"),
        ("a", {"key_path": str(tmp_path / "missing")}, "key_path: key file"),
        ("a", {"known_hosts": "trust-me"}, "known_hosts: 'trust-me' is not a mode"),
        ("a", {"jump": "b,,c"}, "jump:"),
        ("a", {"jump": "-oProxyCommand=x"}, "jump:"),
    ]:
        with pytest.raises(ArgumentError) as raised:
            route(host, **overrides)
        assert problem in str(raised.value), (host, overrides, str(raised.value))


def test_deny_rule_holds_for_every_spelling_and_alias(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, "Host db7\n  HostName 127.0.0.9\n")
    by_address = Policy("open", deny=[r"^127\.0\.0\.9$"])
    by_alias = Policy("open", deny=[r"^db7$"])
    for spelling in ["db7", "127.0.0.9", "2130706441", "0x7f000009", "0177.0.0.9", "127.9", "[::ffff:127.0.0.9]:22"]:
        route = resolve_route(
            inventory,
            spelling,
            user=None,
            port=None,
            key_path=None,
            known_hosts=None,
            jump=None,
            default_mode="accept-new",
        )
        subject = Subject(command="uptime", hosts=route.spellings)
        assert by_address.decide(subject).denied, spelling
        assert by_alias.decide(subject).denied, spelling
    other = resolve_route(
        inventory,
        "127.0.0.8",
        user=None,
        port=None,
        key_path=None,
        known_hosts=None,
        jump=None,
        default_mode="accept-new",
    )
    assert not by_address.decide(Subject(command="uptime", hosts=other.spellings)).denied


def test_ignoring_host_keys_is_tier_two() -> None:
    subject = Subject(command="uptime", hosts=("web1",), unverified_host_key=True)
    decision = Policy("guarded").decide(subject)
    assert decision.tier == 2 and decision.denied
    assert "host-key checking turned off" in decision.reason
    assert Policy("guarded").decide(Subject(fixed_tier=0, hosts=("web1",), unverified_host_key=True)).denied
    assert not Policy("guarded").decide(Subject(command="uptime", hosts=("web1",))).denied


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("LOCALHOST.", "localhost"),
        ("0x7f000001", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("[2001:DB8::0:1]", "2001:db8::1"),
        ("Web1.Example.com", "web1.example.com"),
    ],
)
def test_hosts_are_dialed_under_one_canonical_name(name: str, canonical: str) -> None:
    # known_hosts is matched by the dialed name: `LOCALHOST` or `127.1` must not look like a new host
    assert canonical_host(name) == canonical


def test_deny_rules_naming_the_login_or_this_machine_hold(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, "Host bastion\n  HostName 10.9.0.1\n  User admin\n")

    def subject(host: str, jump: str | None = None) -> Subject:
        route = resolve_route(
            inventory,
            host,
            user=None,
            port=None,
            key_path=None,
            known_hosts=None,
            jump=jump,
            default_mode="accept-new",
        )
        return Subject(command="true", hosts=route.spellings)

    root_on_two = Policy("open", deny=[r"^root@127\.0\.0\.2$"])
    for spelling in ["root@127.0.0.2", "root@0x7f000002:22", "root@[::ffff:127.0.0.2]:22", "root@127.2"]:
        assert root_on_two.decide(subject(spelling)).denied, spelling
    assert not root_on_two.decide(subject("deploy@127.0.0.2")).denied
    admin_bastion = Policy("open", deny=[r"^admin@bastion$"])
    assert admin_bastion.decide(subject("10.0.0.1", jump="bastion")).denied  # the jump host's login counts too
    this_machine = Policy("open", deny=[r"^127\.0\.0\.1$"])
    for spelling in ["0", "0.0.0.0", "localhost", "[::]:22"]:
        assert this_machine.decide(subject(spelling)).denied, spelling


def test_key_path_must_be_a_small_regular_file(tmp_path: Path) -> None:
    inventory = _inventory(tmp_path, "")
    huge = tmp_path / "huge"
    with huge.open("wb") as handle:
        handle.truncate(3 * 1024**3)  # sparse: reading it would take gigabytes of memory
    for path, problem in [(huge, "too large for a key"), (tmp_path, "not a regular file")]:
        with pytest.raises(ArgumentError) as raised:
            resolve_route(
                inventory,
                "h",
                user=None,
                port=None,
                key_path=str(path),
                known_hosts=None,
                jump=None,
                default_mode="accept-new",
            )
        assert str(raised.value).startswith("key_path: ") and problem in str(raised.value)


def test_jump_hosts_are_checked_as_strictly_as_the_target_and_chain(tmp_path: Path) -> None:
    inventory = _inventory(
        tmp_path,
        "Host target\n  HostName 10.0.0.9\n  StrictHostKeyChecking yes\n  ProxyJump inner\n"
        "Host inner\n  HostName 10.1.0.1\n  ProxyJump outer\n"
        "Host outer\n  HostName 10.2.0.1\n"
        "Host loop1\n  ProxyJump loop2\nHost loop2\n  ProxyJump loop1\n",
    )
    route = resolve_route(
        inventory,
        "target",
        user=None,
        port=None,
        key_path=None,
        known_hosts=None,
        jump=None,
        default_mode="accept-new",
    )
    assert [hop.address for hop in route.jumps] == ["10.2.0.1", "10.1.0.1"]  # outer first, as ssh -J does
    assert [hop.known_hosts_mode for hop in route.jumps] == ["strict", "strict"]
    with pytest.raises(ArgumentError) as raised:
        resolve_route(
            inventory,
            "10.0.0.1",
            user=None,
            port=None,
            key_path=None,
            known_hosts=None,
            jump="loop1",
            default_mode="accept-new",
        )
    assert str(raised.value).startswith("jump: ") and "more than" in str(raised.value)


def test_a_numeric_ipv6_zone_is_named_by_its_interface() -> None:
    interface = socket.if_indextoname(1)  # `%1` and `%<name>` are the same link: one known_hosts name
    assert canonical_host("fe80::1%1") == f"fe80::1%{interface}" == canonical_host(f"FE80::1%{interface}")


def test_cached_routes_notice_a_key_file_gone_and_look_at_each_key_once_per_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from relay_shell.settings.model import Settings
    from relay_shell.ssh.connection_args import ConnectionArgs
    from relay_shell.ssh.pool import SshPool
    from relay_shell.ssh.state import Ssh

    names = [f"h{index}" for index in range(5)]
    inventory = _inventory(
        tmp_path,
        "".join(f"Host {name}\n  HostName 10.9.0.{index + 1}\n" for index, name in enumerate(names))
        + f"Host *\n  IdentityFile {tmp_path}/id_test\n",
    )
    pool = SshPool(max_connections=4, max_channels=4, idle_timeout=60, connect_timeout=5, keepalive=0)
    ssh = Ssh(Settings(), inventory, pool)
    first = ssh.routes_of(names, ConnectionArgs())
    assert [route.target.address for route in first.values()] == [f"10.9.0.{index + 1}" for index in range(5)]
    looked_at: list[str] = []
    real_isfile = os.path.isfile
    # A spy, not a mock: the real isfile answers every look-up; the test counts them.
    monkeypatch.setattr(os.path, "isfile", lambda path: looked_at.append(path) or real_isfile(path))
    assert ssh.routes_of(names, ConnectionArgs()) == first  # from the cache: the one key file looked at once
    assert looked_at == [f"{tmp_path}/id_test"]
    (tmp_path / "id_test").unlink()
    with pytest.raises(ArgumentError, match="does not exist"):  # a key gone is said again, not dialed with
        ssh.routes_of(names, ConnectionArgs())
    with pytest.raises(ArgumentError, match="does not exist"):
        ssh.route("h3", ConnectionArgs())
