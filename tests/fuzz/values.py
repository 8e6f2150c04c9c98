"""JSON values a hostile client sends, and a JSON writer for the ones Python's encoder cannot write.

Python's `json` cannot write a number like `1e309` (it is `inf` once read), an integer of 5,000 digits (int to
str stops at 4,300 digits), or an array nested 5,000 deep (recursion). `Raw` holds JSON text written as is;
`Deep` is `levels` arrays around a leaf. `encode` writes any value made of dicts, lists, strings (lone
surrogates as `\\udXXX` escapes), numbers, booleans, None, `Raw` and `Deep`; `shape` measures what a server's
reader sees: the nesting depth and the longest integer literal.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Raw:
    """JSON text written as is: a number Python cannot write, or a literal a strict reader refuses."""

    text: str
    digits: int = 0  # the longest run of integer digits in it (what a reader's integer limit sees)


@dataclass(frozen=True)
class Deep:
    """`levels` nested arrays around `leaf`: `[[[…leaf…]]]`."""

    levels: int
    leaf: Any = None


def huge_integer(digits: int, negative: bool = False) -> Raw:
    return Raw(("-" if negative else "") + "7" * digits, digits=digits)


def encode(value: Any) -> str:
    """JSON text of `value`, ASCII only (a lone surrogate becomes a `\\udXXX` escape, as JSON allows)."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Deep):
        return "[" * value.levels + encode(value.leaf) + "]" * value.levels
    if isinstance(value, dict):
        return "{" + ",".join(f"{encode(str(key))}:{encode(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(encode(item) for item in value) + "]"
    return json.dumps(value, ensure_ascii=True)


def shape(value: Any) -> tuple[int, int]:
    """(depth, longest integer literal in digits) of a value. Depth: the most containers around any value
    inside it, `value` itself included when it is a container (`[]` is 0, `[1]` and `[[]]` are 1)."""
    if isinstance(value, Raw):
        return 0, value.digits
    if isinstance(value, Deep):
        depth, digits = shape(value.leaf)
        return value.levels + depth, digits
    if isinstance(value, dict | list | tuple):
        inner = [shape(item) for item in (value.values() if isinstance(value, dict) else value)]
        if not inner:
            return 0, 0
        return 1 + max(depth for depth, _ in inner), max(digits for _, digits in inner)
    if isinstance(value, int) and not isinstance(value, bool):
        return 0, len(str(abs(value)))
    return 0, 0


# -- pools: realistic values per argument name, and targets that stay on this machine ----------------------

# Every SSH target resolves nowhere or is a closed port on loopback: nothing leaves this machine, and no
# sshd another test runs on 127.0.0.x:22 is ever reached (every address names port 1).
SAFE_HOSTS = [
    "127.0.0.2:1",
    "127.0.0.3:1",
    "root@127.0.0.4:1",
    "[::1]:1",
    "nohost.invalid",
    "user@nohost.invalid:2222",
    "a" * 64 + ".invalid",  # a DNS label over 63 characters: no name server can be asked for it
    "x." * 120 + "invalid",  # a name of 250 characters
]
HOSTILE_HOSTS = [
    "",
    " ",
    "-oProxyCommand=touch /tmp/pwned",
    "@all",
    "@nogroup",
    "127.0.0.2:0",
    "127.0.0.2:65536",
    "127.0.0.2:99999999999999999999",
    "[::1",
    "host name",
    "u" * 70 + "@127.0.0.2:1",
    "ü.invalid",
    "\u202e.invalid",
    "a\x00b.invalid",
    "a.invalid,b.invalid,,c.invalid",
]
SAFE_COMMANDS = ["true", "echo hi", "ls /", "cat /dev/null", "printf x", "id -u", "uname -a", "date"]
HOSTILE_COMMANDS = [
    "rm -rf /",
    ":(){ :|:& };:",
    "curl http://127.0.0.1:1 | sh",
    "echo $(id)",
    "sudo reboot",
    "dd if=/dev/zero of=/dev/sda",
    "mkfs.ext4 /dev/sda1",
    "cat /etc/shadow",
    "echo 'unclosed",
    "\n\n\n",
]
PATHS = [
    "/",
    "/tmp",
    "/etc/hostname",
    "/dev/zero",
    "/dev/null",
    "/proc/self/mem",
    "~",
    "~nosuchuser/x",
    "../../../../etc/shadow",
    "relative/path",
    "/no/such/dir",
    "/" + "d" * 300,  # a name longer than NAME_MAX
    "/" + "d/" * 2100,  # a path longer than PATH_MAX
    "/tmp/a\x00b",
]
SESSION_IDS = ["s-000000000000", "s-1a2b3c4d5e6f", "s-", "", "S-1A2B3C4D5E6F", "../s-1"]
FORWARD_SPECS = ["L:0:127.0.0.1:1", "D:0", "R:0:127.0.0.1:1", "L:0:[::1]:1", "X:1", "L:99999:a:b", "L::::", ""]
SIGNALS = ["TERM", "KILL", "INT", "SIGHUP", "BOGUS", "", "9", "term"]
KNOWN_HOSTS_MODES = ["strict", "accept-new", "ignore", "STRICT", "yes", ""]
KEY_TYPES = ["ssh-ed25519", "rsa-sha2-512", "ssh-dss", "", "x" * 300]
INTERPRETERS = ["bash", "sh", "python", "ruby", "BASH", "", "/bin/bash"]
REGEXES = ["^\\$ $", "(a+)+$", "[", "(?P<x>", "\\", ".*" * 50, "(?i)ok", "\\d{1000000}"]
TOOL_FILTERS = ["shell_exec", "unknown", "prompt:operating_guide", "", "%", ".*"]

UNICODE_EDGES = [
    "\ud800",  # lone high surrogate
    "\udfff",  # lone low surrogate
    "a\udc80b",
    "\x00",
    "\ufeff",  # BOM
    "\u202e",  # right-to-left override
    "\u200b",  # zero-width space
    "\U0001f600",  # an emoji (a surrogate pair in UTF-16)
    "e\u0301",  # combining accent
    "\uffff",
    "\x1b[31m",  # a terminal escape
    "\r\n",
    "\u0085",  # NEL
    "\u2028",  # line separator
    "ñ" * 10,
]

# Names an argument pool is chosen by (the schema says only "string": the name says what it means).
HOST_NAMES = {"host", "jump"}


def text(rng: random.Random, size: int = 12) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789 -_./:=@$'\"\\"
    return "".join(rng.choice(alphabet) for _ in range(size))


def unicode_text(rng: random.Random) -> str:
    return "".join(rng.choice([*UNICODE_EDGES, "x", "y", " "]) for _ in range(rng.randint(1, 6)))


def host_value(rng: random.Random, hostile: bool) -> str:
    return rng.choice(HOSTILE_HOSTS if hostile else SAFE_HOSTS)


def hosts_value(rng: random.Random, hostile: bool) -> Any:
    pool = SAFE_HOSTS + (HOSTILE_HOSTS if hostile else [])
    count = rng.randint(1, 4)
    chosen = [rng.choice(pool) for _ in range(count)]
    return ",".join(chosen) if rng.random() < 0.3 else chosen


def string_for(name: str, rng: random.Random, hostile: bool) -> str:
    """A plausible (or, hostile, an edge-case) string for the argument `name`."""
    if name in HOST_NAMES:
        return host_value(rng, hostile)
    if name in ("command", "script"):
        return rng.choice(HOSTILE_COMMANDS if hostile else SAFE_COMMANDS)
    if name in ("cwd", "local_path", "remote_path", "key_path"):
        return rng.choice(PATHS) if hostile or rng.random() < 0.5 else "/tmp"
    if name == "session_id":
        return rng.choice(SESSION_IDS)
    if name == "forward_id":
        return rng.choice(["f-000000000000", "f-", "", "../f"])
    if name == "spec":
        return rng.choice(FORWARD_SPECS)
    if name == "signal":
        return rng.choice(SIGNALS)
    if name == "known_hosts":
        return rng.choice(KNOWN_HOSTS_MODES)
    if name == "interpreter":
        return rng.choice(INTERPRETERS)
    if name == "until":
        return rng.choice(REGEXES)
    if name == "tool":
        return rng.choice(TOOL_FILTERS)
    if name == "bind_address":
        return rng.choice(["127.0.0.1", "0.0.0.0", "::1", "not-an-address", ""])
    if name == "user":
        return rng.choice(["root", "nobody", "", "-oProxyCommand=x", "u" * 80, "a@b"])
    if name == "token":
        return rng.choice(["A" * 43, "short", "", "A" * 44])
    if name == "secret_env":
        return rng.choice(["HOME", "NO_SUCH", "", "A=B"])
    return text(rng, rng.randint(0, 16))
