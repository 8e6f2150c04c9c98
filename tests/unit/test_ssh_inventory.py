"""Inventory: ssh_config through asyncssh's parser, our JSON/YAML format, Ansible YAML/INI, reloads, problems."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from relay_shell.ssh.inventory import load as inventory_module
from relay_shell.ssh.inventory.fields import MAX_HOSTS, InventoryError
from relay_shell.ssh.inventory.load import Inventory
from relay_shell.ssh.inventory.ssh_config import MATCH_EXEC_REFUSED


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private HOME: relative Includes resolve against ~/.ssh, and ~ in paths expands here."""
    home_dir = tmp_path / "home"
    (home_dir / ".ssh").mkdir(parents=True)
    # Settings, not mocks: a private HOME (ssh_config Includes resolve against ~/.ssh) and no reload delay.
    monkeypatch.setenv("HOME", str(home_dir))
    # Every call re-checks the files, so a test sees its own edits at once.
    monkeypatch.setattr(inventory_module, "RECHECK_INTERVAL_SECONDS", 0.0)
    return home_dir


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def rewrite(path: Path, text: str) -> None:
    """Rewrite and push the mtime forward, so the change is visible even on coarse-mtime filesystems."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))


def test_ssh_config_include_and_match(home: Path) -> None:
    config = write(
        home / ".ssh" / "config",
        """
Include config.d/*

Host web1 web2 *.wild !negated
    HostName %h.example.com
    User deploy

Match originalhost web2
    Port 2202

Match host 10.9.*
    User matched

Host *
    IdentityFile ~/.ssh/id_test
""",
    )
    included = write(home / ".ssh" / "config.d" / "db", "Host db1\n    HostName 10.9.0.1\n    Port 2200\n")
    inventory = Inventory(config, None)

    assert inventory.problems() == []
    assert sorted(inventory.hosts()) == ["db1", "web1", "web2"]
    web1 = inventory.lookup("web1")
    assert web1 is not None
    assert (web1.hostname, web1.user, web1.port, web1.source) == ("web1.example.com", "deploy", None, "ssh_config")
    assert web1.key_path == str(home / ".ssh" / "id_test")
    web2 = inventory.lookup("web2")
    assert web2 is not None and web2.port == 2202  # Match originalhost
    db1 = inventory.lookup("db1")
    assert db1 is not None
    assert (db1.hostname, db1.port, db1.user) == ("10.9.0.1", 2200, "matched")  # Match host sees the HostName
    assert inventory.files() == [config, included]
    assert inventory.groups() == {"all": ("db1", "web1", "web2")}

    # Any name, not only listed ones: `Host *` applies, and explicit user/port win over the file.
    other = inventory.ssh_options("elsewhere", user="root", port=2222)
    assert (other.hostname, other.user, other.port) == (None, "root", 2222)
    assert other.identity_files == (str(home / ".ssh" / "id_test"),)


def test_strict_host_key_checking_and_other_options(home: Path) -> None:
    config = write(
        home / ".ssh" / "config",
        """
Host h-yes
    StrictHostKeyChecking yes
Host h-no
    StrictHostKeyChecking no
Host h-new
    StrictHostKeyChecking Accept-New
    ProxyJump jumper@bastion:2222,hop2
Host h-ask
    StrictHostKeyChecking ask
    ProxyJump none
Host h-off
    StrictHostKeyChecking off
    UserKnownHostsFile ~/.ssh/kh_%h /etc/kh
Host h-unset
    HostName 192.0.2.7
""",
    )
    inventory = Inventory(config, None)
    modes = {name: host.known_hosts for name, host in inventory.hosts().items()}
    assert modes == {
        "h-ask": "strict",
        "h-new": "accept-new",
        "h-no": "accept-new",
        "h-off": "accept-new",
        "h-unset": None,
        "h-yes": "strict",
    }
    new = inventory.ssh_options("h-new")
    assert new.strict_host_key_checking == "accept-new"
    assert new.proxy_jump == "jumper@bastion:2222,hop2"
    assert inventory.hosts()["h-new"].jump == "jumper@bastion:2222,hop2"
    assert inventory.ssh_options("h-ask").proxy_jump is None
    assert inventory.ssh_options("h-off").user_known_hosts_files == (str(home / ".ssh" / "kh_h-off"), "/etc/kh")
    unset = inventory.ssh_options("h-unset")
    assert (unset.strict_host_key_checking, unset.identity_files, unset.port) == (None, (), None)


def test_no_ssh_config_and_no_inventory(home: Path) -> None:
    for inventory in (Inventory(None, None), Inventory(home / ".ssh" / "missing", None)):
        assert inventory.hosts() == {}
        assert inventory.groups() == {"all": ()}
        assert inventory.problems() == []
        assert inventory.files() == []
        options = inventory.ssh_options("anything")
        assert (options.hostname, options.user, options.identity_files) == (None, None, ())


def test_own_json_format(tmp_path: Path, home: Path) -> None:
    data = {
        "hosts": {
            "web1": {
                "hostname": "10.0.0.5",
                "port": 22,
                "user": "deploy",
                "key_path": "~/.ssh/id_deploy",
                "jump": "bastion",
                "known_hosts": "strict",
                "groups": ["web"],
            },
            "web2": None,
            "web3": {"groups": ["web", "db"]},
        },
        "groups": {"db": ["db1", "db2"]},
    }
    path = write(tmp_path / "inventory.json", json.dumps(data))
    inventory = Inventory(None, path)

    assert inventory.problems() == []
    web1 = inventory.lookup("web1")
    assert web1 is not None
    assert (web1.hostname, web1.port, web1.user, web1.jump, web1.known_hosts) == (
        "10.0.0.5",
        22,
        "deploy",
        "bastion",
        "strict",
    )
    assert web1.key_path == str(home / ".ssh" / "id_deploy")
    assert (web1.groups, web1.source) == (("web",), str(path))
    web2 = inventory.lookup("web2")
    assert web2 is not None and (web2.hostname, web2.groups) == (None, ())
    db1 = inventory.lookup("db1")  # named only by a group: a bare host from the file
    assert db1 is not None and (db1.groups, db1.source) == (("db",), str(path))
    assert inventory.groups() == {
        "all": ("db1", "db2", "web1", "web2", "web3"),
        "db": ("db1", "db2", "web3"),
        "web": ("web1", "web3"),
    }
    assert inventory.lookup("web3") is not None and inventory.lookup("web3").groups == ("db", "web")  # type: ignore[union-attr]
    assert inventory.files() == [path]


def test_own_yaml_format_groups_ssh_config_hosts(tmp_path: Path, home: Path) -> None:
    config = write(home / ".ssh" / "config", "Host cfg1\n    HostName 192.0.2.10\n    User admin\n")
    path = write(
        tmp_path / "hosts.yaml",
        """
hosts:
  app1:
    hostname: app1.internal
    port: "2022"
    known_hosts: ignore
  app2: {}
groups:
  apps: [app1, app2, cfg1]
""",
    )
    inventory = Inventory(config, path)
    assert inventory.problems() == []
    app1 = inventory.lookup("app1")
    assert app1 is not None and (app1.hostname, app1.port, app1.known_hosts) == ("app1.internal", 2022, "ignore")
    cfg1 = inventory.lookup("cfg1")
    # Grouped by the inventory, still defined by ssh_config.
    assert cfg1 is not None and (cfg1.source, cfg1.hostname, cfg1.user, cfg1.groups) == (
        "ssh_config",
        "192.0.2.10",
        "admin",
        ("apps",),
    )
    assert inventory.group_members("apps") == ["app1", "app2", "cfg1"]
    assert inventory.files() == [config, path]


def test_ansible_yaml_nested_children_and_vars(tmp_path: Path, home: Path) -> None:
    path = write(
        tmp_path / "ansible.yml",
        """
all:
  vars:
    ansible_user: everyone
    ansible_port: 2000
    unrelated_var: ignored
  hosts:
    lonely:
  children:
    prod:
      vars:
        ansible_port: 3000
        ansible_user: produser
      children:
        web:
          vars:
            ansible_port: 4000
          hosts:
            web[01:03].example.com:
            special:
              ansible_port: 5000
              ansible_host: 10.0.0.9
              ansible_ssh_common_args: "-o StrictHostKeyChecking=no -o ProxyJump=jumper@bastion:2222"
        db:
          hosts:
            db-[a:b]:
              ansible_ssh_private_key_file: ~/.ssh/db_key
    staging:
      hosts:
        web02.example.com:
""",
    )
    inventory = Inventory(None, path)
    assert inventory.problems() == []
    web01 = inventory.lookup("web01.example.com")
    assert web01 is not None
    # child group vars (web) beat parent (prod), which beats all; user comes from prod.
    assert (web01.port, web01.user, web01.groups) == (4000, "produser", ("prod", "web"))
    web02 = inventory.lookup("web02.example.com")
    assert web02 is not None and web02.groups == ("prod", "staging", "web")
    special = inventory.lookup("special")
    assert special is not None
    assert (special.port, special.hostname, special.jump) == (5000, "10.0.0.9", "jumper@bastion:2222")
    db_a = inventory.lookup("db-a")
    assert db_a is not None
    assert (db_a.port, db_a.user, db_a.groups) == (3000, "produser", ("db", "prod"))
    assert db_a.key_path == str(home / ".ssh" / "db_key")
    lonely = inventory.lookup("lonely")
    assert lonely is not None and (lonely.port, lonely.user, lonely.groups) == (2000, "everyone", ("ungrouped",))

    assert sorted(inventory.groups()) == ["all", "db", "prod", "staging", "ungrouped", "web"]
    assert inventory.group_members("prod") == [
        "db-a",
        "db-b",
        "special",
        "web01.example.com",
        "web02.example.com",
        "web03.example.com",
    ]
    assert len(inventory.group_members("all")) == 7


def test_ansible_ini_ranges_vars_children_quotes(tmp_path: Path, home: Path) -> None:
    path = write(
        tmp_path / "hosts",
        """# an Ansible INI inventory
loose ansible_host=192.0.2.1

[web]
web[1:2].example.com
web3.example.com:2222 ansible_host='10.0.0.3' ansible_ssh_common_args="-J hop1,hop2"

[db]
db-[a:c] ansible_ssh_private_key_file="~/.ssh/db key"

[batch]
node[00:08:4]

[web:vars]
ansible_user = "webadmin"
ansible_port=2200

[prod:children]
web
db

[prod:vars]
ansible_user=produser
ansible_port=2100
""",
    )
    inventory = Inventory(None, path)
    assert inventory.problems() == []
    web1 = inventory.lookup("web1.example.com")
    assert web1 is not None and (web1.user, web1.port, web1.groups) == ("webadmin", 2200, ("prod", "web"))
    web3 = inventory.lookup("web3.example.com")
    assert web3 is not None
    assert (web3.port, web3.hostname, web3.jump) == (2222, "10.0.0.3", "hop1,hop2")
    db_b = inventory.lookup("db-b")
    assert db_b is not None
    assert (db_b.user, db_b.port, db_b.key_path) == ("produser", 2100, str(home / ".ssh" / "db key"))
    loose = inventory.lookup("loose")
    assert loose is not None and (loose.hostname, loose.groups) == ("192.0.2.1", ("ungrouped",))
    assert inventory.group_members("batch") == ["node00", "node04", "node08"]
    assert inventory.group_members("prod") == [
        "db-a",
        "db-b",
        "db-c",
        "web1.example.com",
        "web2.example.com",
        "web3.example.com",
    ]


def test_reload_when_files_change(tmp_path: Path, home: Path) -> None:
    config = write(home / ".ssh" / "config", "Include config.d/*\nHost first\n    Port 2201\n")
    (home / ".ssh" / "config.d").mkdir()
    path = write(tmp_path / "inventory.json", json.dumps({"hosts": {"one": {}}}))
    inventory = Inventory(config, path)
    hosts = inventory.hosts()
    assert sorted(hosts) == ["first", "one"]
    assert inventory.hosts() is hosts  # unchanged files: the same dict, so callers can cache on it

    rewrite(path, json.dumps({"hosts": {"one": {}, "two": {"port": 2022}}}))
    two = inventory.lookup("two")
    assert two is not None and two.port == 2022
    assert inventory.hosts() is not hosts

    rewrite(config, "Include config.d/*\nHost first\n    Port 2301\n")
    first = inventory.lookup("first")
    assert first is not None and first.port == 2301

    # A new file matching the Include glob: the directory listing changed.
    directory = home / ".ssh" / "config.d"
    before = directory.stat().st_mtime_ns
    write(directory / "extra", "Host added\n    User added-user\n")
    os.utime(directory, ns=(before + 2_000_000_000, before + 2_000_000_000))
    added = inventory.lookup("added")
    assert added is not None and added.user == "added-user"
    assert directory / "extra" in inventory.files()


def test_missing_inventory_is_a_problem_until_it_appears(tmp_path: Path) -> None:
    path = tmp_path / "later.yaml"
    inventory = Inventory(None, path)
    assert inventory.problems() == [f"inventory file {path} does not exist"]
    assert inventory.hosts() == {}
    write(path, "hosts:\n  arrived: {user: ops}\n")
    arrived = inventory.lookup("arrived")
    assert arrived is not None and arrived.user == "ops"
    assert inventory.problems() == []


def test_recheck_is_rate_limited(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inventory_module, "RECHECK_INTERVAL_SECONDS", 1.0)
    path = write(tmp_path / "inventory.json", json.dumps({"hosts": {"one": {}}}))
    inventory = Inventory(None, path)
    started = time.monotonic()
    rewrite(path, json.dumps({"hosts": {"one": {}, "two": {}}}))
    seen_early = inventory.lookup("two")
    if time.monotonic() - started < 0.9:  # still within the interval: no stat, no reload
        assert seen_early is None
    time.sleep(1.1)
    assert inventory.lookup("two") is not None


def test_malformed_files_give_problems_naming_the_file(tmp_path: Path, home: Path) -> None:
    config = write(home / ".ssh" / "config", "Host good\n    User ok\n")

    bad_json = write(tmp_path / "bad.json", '{"hosts": {"a": }')
    inventory = Inventory(config, bad_json)
    assert len(inventory.problems()) == 1
    assert inventory.problems()[0].startswith(f"{bad_json} line 1: invalid JSON")
    assert sorted(inventory.hosts()) == ["good"]  # ssh_config still loads

    bad_yaml = write(tmp_path / "bad.yaml", "hosts:\n  a: [unclosed\n")
    problems = Inventory(None, bad_yaml).problems()
    assert len(problems) == 1 and problems[0].startswith(f"{bad_yaml} line ") and "invalid YAML" in problems[0]

    bad_ini = write(tmp_path / "bad.ini", "[web]\nweb1 ansible_port=70000\nweb2 novalue\nweb3\n[broken section]\n")
    inventory = Inventory(None, bad_ini)
    assert inventory.problems() == [
        f"{bad_ini} line 3: expected key=value host variables after the host, got 'novalue'",
        f"{bad_ini} line 5: invalid section header '[broken section]'; allowed: [group], [group:vars], "
        "[group:children] with no spaces",
        f"{bad_ini}: host 'web1': ansible_port must be an integer 1..65535, got '70000'",
    ]
    assert inventory.group_members("web") == ["web3"]

    fields = write(
        tmp_path / "fields.json",
        json.dumps(
            {
                "hosts": {
                    "ok": {"port": 2222},
                    "badport": {"port": 0, "groups": ["g"]},
                    "badmode": {"known_hosts": "maybe"},
                    "typo": {"hostnme": "x"},
                    "bad name": {},
                },
                "groups": {"g": ["badport", "ok"]},
            }
        ),
    )
    inventory = Inventory(None, fields)
    assert inventory.problems() == [
        f"{fields}: host 'badport': port must be an integer 1..65535, got 0",
        f"{fields}: host 'badmode': known_hosts must be one of strict, accept-new, ignore, got 'maybe'",
        f"{fields}: host 'typo': unknown field 'hostnme'; allowed: hostname, port, user, key_path, jump, "
        "known_hosts, groups",
        f"{fields}: host name 'bad name' must be a non-empty string without whitespace",
    ]
    assert sorted(inventory.hosts()) == ["ok"]  # a rejected entry stays out of its groups too
    assert inventory.group_members("g") == ["ok"]


def test_broken_ssh_config_is_a_problem_not_a_crash(tmp_path: Path, home: Path) -> None:
    config = write(home / ".ssh" / "config", "Host a\n    Port notanumber\n")
    inventory_path = write(tmp_path / "inv.json", json.dumps({"hosts": {"x": {}}}))
    inventory = Inventory(config, inventory_path)
    assert inventory.problems() == [f"ssh_config: {config} line 2: Invalid Port integer value: notanumber"]
    assert sorted(inventory.hosts()) == ["x"]
    assert inventory.ssh_options("a").port is None

    # An Include loop: asyncssh alone would recurse until RecursionError.
    rewrite(config, f"Include {config}\nHost a\n")
    problems = inventory.problems()
    assert len(problems) == 1 and "Include nested more than 16 levels deep" in problems[0]


def test_limits(tmp_path: Path) -> None:
    huge = tmp_path / "huge.json"
    with huge.open("wb") as handle:
        handle.truncate(8 * 1024 * 1024 + 1)
    assert Inventory(None, huge).problems() == [
        f"inventory file {huge} is {8 * 1024 * 1024 + 1} bytes; at most {8 * 1024 * 1024} are read"
    ]

    many = write(tmp_path / "many.ini", "[big]\nh[1:20000]\n[small]\nh1\n")
    inventory = Inventory(None, many)
    assert inventory.problems() == [
        f"{many} line 2: host 'h[1:20000]': range [1:20000] makes 20000 hosts; at most {MAX_HOSTS} are allowed"
    ]
    assert inventory.groups() == {"all": ("h1",), "big": (), "small": ("h1",), "ungrouped": ()}


def test_unknown_group_error(tmp_path: Path) -> None:
    path = write(tmp_path / "inv.yaml", "hosts:\n  w1: {groups: [web]}\ngroups:\n  db: [d1]\n")
    inventory = Inventory(None, path)
    with pytest.raises(InventoryError) as caught:
        inventory.group_members("nope")
    assert str(caught.value) == "unknown group 'nope'; known groups: all, db, web"


def test_inventory_entry_overrides_ssh_config_host(tmp_path: Path, home: Path) -> None:
    config = write(home / ".ssh" / "config", "Host web1 web2\n    HostName from-config\n    User cfguser\n")
    path = write(tmp_path / "inv.json", json.dumps({"hosts": {"web1": {"hostname": "from-inventory", "port": 2022}}}))
    inventory = Inventory(config, path)
    web1 = inventory.lookup("web1")
    assert web1 is not None
    assert (web1.hostname, web1.port, web1.user, web1.source) == ("from-inventory", 2022, None, str(path))
    web2 = inventory.lookup("web2")
    assert web2 is not None and (web2.hostname, web2.source) == ("from-config", "ssh_config")
    # ssh_options still says what ssh_config says, for the caller to fill in what the entry leaves unset.
    assert inventory.ssh_options("web1").user == "cfguser"


def test_match_exec_never_runs_and_is_a_load_problem(tmp_path: Path, home: Path) -> None:
    """Issue 30: `Match exec` would run its program whenever the config is read, outside any call (adr/0007). It
    runs nothing, its block never applies (negated or not, alone or with other criteria, in an Included file
    too), and each such line is a load problem naming the file and the line."""
    marker = tmp_path / "exec-ran"
    write(home / ".ssh" / "extra.conf", f'Match host web1 exec "touch {marker}-included"\n    Port 2201\n')
    config = write(
        home / ".ssh" / "config",
        f'Match exec "touch {marker}"\n    User from-exec\n'
        f'Match !exec "touch {marker}-negated"\n    User from-negated-exec\n'
        "Match canonical all\n    Compression no\n"
        "Include extra.conf\n"
        "Host web1 web2\n    HostName 10.0.0.1\n",
    )
    inventory = Inventory(config, None)
    for host in ("web1", "web2", "somewhere"):
        options = inventory.ssh_options(host)
        assert options.user is None and options.port is None, (host, options)  # no exec block applied
    assert sorted(inventory.hosts()) == ["web1", "web2"]
    assert not list(tmp_path.glob("exec-ran*")), "a Match exec program ran"
    problems = inventory.problems()
    lines = [f"{config} line 1", f"{config} line 3", f"{home / '.ssh' / 'extra.conf'} line 1"]
    assert problems == [f"ssh_config: {where}: {MATCH_EXEC_REFUSED}" for where in lines], problems


def test_a_listed_hosts_options_are_read_once_per_load(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Listing the hosts reads each one's options; routing to them must not read the whole file again per host
    (a 256-host fan-out did: one walk of a 257-block ssh_config per host). A change to the file still shows."""
    hosts = [f"web{index:03d}" for index in range(40)]
    config = write(
        tmp_path / "ssh_config",
        "".join(
            f"Host {name}\n    HostName 10.0.{index // 250}.{index % 250 + 1}\n" for index, name in enumerate(hosts)
        ),
    )
    # Not a mock: a wrapper that counts the calls and hands each to the real reader over the real file.
    reads: list[str] = []
    real = inventory_module.read_ssh_options

    def counted(path: Path, host: str, user: str | None, port: int | None) -> object:
        reads.append(host)
        return real(path, host, user, port)

    monkeypatch.setattr(inventory_module, "read_ssh_options", counted)
    inventory = Inventory(config, None)
    assert [inventory.ssh_options(name).hostname for name in hosts[:3]] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    for name in hosts:
        inventory.ssh_options(name)
    assert reads == []
    assert inventory.ssh_options("not-listed").hostname is None  # a name the file does not list: read for it
    assert reads == ["not-listed"]
    rewrite(config, "Host web000\n    HostName 192.0.2.7\n")
    assert inventory.ssh_options("web000").hostname == "192.0.2.7"
