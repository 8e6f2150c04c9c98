"""ssh_forward's spec grammar and the spellings a destination is reached by, without a server (the tools
end to end: tests/e2e/ssh/test_forward.py)."""

from __future__ import annotations

from pathlib import Path

from relay_shell.ssh.forwards.spec import ForwardSpec, parse_spec
from relay_shell.ssh.inventory.load import Inventory
from relay_shell.ssh.target import reached_spellings


def ssh_config(directory: Path) -> Path:
    """Three hosts as tests/sshd.py's fleet names them: h01..h03 on 127.0.0.2..127.0.0.4."""
    path = directory / "ssh_config"
    path.write_text(
        "".join(f"Host h{index:02d}\n    HostName 127.0.0.{index + 1}\n    User root\n" for index in range(1, 4))
    )
    return path


def test_specs_are_parsed_into_what_is_dialed(tmp_path: Path) -> None:
    assert parse_spec("L:0:[::1]:80") == ForwardSpec("L", 0, "::1", 80)
    assert parse_spec(" r:8080:DB.Example.:5432 ") == ForwardSpec("R", 8080, "db.example", 5432)
    assert parse_spec("D:1080") == ForwardSpec("D", 1080)
    # The policy's spelling is the one dialed: a numeric IPv4 in any inet_aton form becomes its dotted quad.
    for spelling in ("2130706433", "0x7f.1", "0177.0.0.1", "127.1"):
        assert parse_spec(f"L:0:{spelling}:80").dest_host == "127.0.0.1"
    assert parse_spec("L:0:[::ffff:127.0.0.1]:80").dest_host == "127.0.0.1"
    assert parse_spec("L:0:[::1]:80").text(4321) == "L:4321:[::1]:80"
    # An inventory alias and its address lead to each other, for deny rules on either.
    inventory = Inventory(ssh_config(tmp_path), None)
    assert "h03" in reached_spellings(inventory, "127.0.0.4")
    assert {"127.0.0.4", "::ffff:127.0.0.4"} <= set(reached_spellings(inventory, "h03"))
