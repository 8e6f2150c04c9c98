"""A large audit log shaped like a team deployment's: the report benchmark (benchmarks/bench_report.py) and tests.

Records are written through the real AuditLog (chained, as the server writes them), with the fields and shapes of
the records a real server writes (start and end records joined by call_id, exec traces on, sessions with their
sends and reads and a `session:end`, fan-outs with per-host results, tier-3 confirmations, denials, timeouts, reads,
`exec:late`, a `server:start` per restart and a signed-checkpoint-sized record every 1,000 records). Commands come
from the tldr-pages corpus (/work/shared/corpus), so arguments vary as real ones do; the mix is fixed by a seed.
"""

from __future__ import annotations

import hashlib
import random
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from relay_shell.audit.log import AuditLog
from relay_shell.audit.record import audit_arguments
from relay_shell.offhost.checkpoints import checkpoint_record
from relay_shell.offhost.signing_keys import key_id

CORPUS = Path("/work/shared/corpus/tldr-commands.jsonl")
CLIENTS = ["stdio:claude-code", "http:alice", "http:bob", "http:deploy-bot"]
HOSTS = [f"db{index:02d}.prod" for index in range(1, 9)] + [f"web{index:02d}.prod" for index in range(1, 13)]
CHECKPOINT_EVERY = 1000  # the server's default AUDIT_CHECKPOINT_INTERVAL
FALLBACK_COMMANDS = ["systemctl status nginx --no-pager", "df -h", "journalctl -u app --since today", "ls -la /srv"]


def corpus_commands() -> list[str]:
    if not CORPUS.exists():
        return FALLBACK_COMMANDS
    return [orjson.loads(line)["command"] for line in CORPUS.read_bytes().splitlines()]


class _Clock:
    """Record times: ~2.6 s apart on average, so 100,000 calls span about three days."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.microseconds = 1_795_000_000 * 1_000_000

    def tick(self, milliseconds: float) -> str:
        self.microseconds += int(milliseconds * 1000)
        seconds, micros = divmod(self.microseconds, 1_000_000)
        import time

        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{micros:06d}Z"


def _digest(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _execs(rng: random.Random, command: str, server_pid: int, pid: int) -> dict[str, Any]:
    try:
        words = shlex.split(command)[:8]
    except ValueError:
        words = command.split()[:8]
    entries = [
        {"argv": ["/bin/sh", "-c", command], "ok": True, "path": "/bin/sh", "pid": pid, "ppid": server_pid, "t_ms": 0.4}
    ]
    if words:
        program = words[0]
        entries.append(
            {
                "argv": words,
                "ok": True,
                "path": f"/usr/bin/{program}",
                "pid": pid + 1,
                "ppid": pid,
                "t_ms": round(rng.uniform(2, 20), 1),
            }
        )
    if rng.random() < 0.3:
        entries.append(
            {
                "argv": ["grep", "-v", "^#"],
                "ok": True,
                "path": "/usr/bin/grep",
                "pid": pid + 2,
                "ppid": pid,
                "t_ms": 9.1,
            }
        )
    count = len(entries)
    return {"count": count, "entries": entries, "entries_omitted": 0, "not_found": 0, "sha256": _digest(entries)}


class LogWriter:
    """Writes calls as a server would, counting them."""

    def __init__(self, path: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.clock = _Clock(self.rng)
        self.log = AuditLog(path, chain=True, fsync=False)
        self.log.open()
        self.commands = corpus_commands()
        self.calls = 0
        self.tag = ""
        self.number = 0
        self.request = 0
        self.pid = 0
        self.next_pid = 3000
        self.key = Ed25519PrivateKey.generate()
        self.checkpointed = 0

    def close(self) -> None:
        self.log.close()

    def _write(self, record: dict[str, Any]) -> None:
        """Append a record, and a signed checkpoint after every CHECKPOINT_EVERY records, as a server does."""
        self.log.write(record)
        if self.log.seq - self.checkpointed >= CHECKPOINT_EVERY:
            self.log.write_at_head(
                lambda seq, prev: checkpoint_record(self.key, key_id(self.key.public_key()), "records", seq, prev)
            )
            self.checkpointed = self.log.seq

    def server_start(self, mode: str) -> None:
        self.tag = f"{self.rng.getrandbits(48):012x}"
        self.number = 0
        self.pid = self.rng.randint(1000, 90000)
        record = self._common("server:start", 0, "server") | {
            "outcome": "ok",
            "args": {},
            "duration_ms": 0,
            "call_tag": self.tag,
            "pid": self.pid,
            "version": "0.1.0",
            "interrupted": [],
            "interrupted_count": 0,
            "scan": {"bytes": 0, "complete": True},
            "leftover_processes": [],
            "policy": {"mode": mode, "confirm_tier3": "token", "exec_trace": "on", "gate": "off"},
        }
        self._write(record)

    def execs(self, command: str) -> dict[str, Any]:
        # pids are handed out in order; the rest of the host takes some between two calls
        self.next_pid += self.rng.randint(3, 40)
        return _execs(self.rng, command, self.pid, self.next_pid)

    def _common(self, tool: str, tier: int, client: str) -> dict[str, Any]:
        return {
            "v": 1,
            "ts": self.clock.tick(self.rng.expovariate(1 / 2600)),
            "tool": tool,
            "tier": tier,
            "denied": False,
            "client_id": client,
            "request_id": None,
        }

    def _call_id(self) -> str:
        self.number += 1
        self.calls += 1
        return f"{self.tag}-{self.number}"

    def call(self, tool: str, arguments: dict[str, Any], client: str, tier: int, **end: Any) -> str:
        """A call's start record and its end record; `end` holds the end record's own fields."""
        call_id = self._call_id()
        self.request += 1
        args = audit_arguments(arguments)
        extra = {key: end.pop(key) for key in ("target", "session_id", "confirmation") if key in end}
        start = self._common(tool, tier, client) | {
            "phase": "start",
            "call_id": call_id,
            "decision": end.pop("decision", "admitted"),
            "args": args,
            "request_id": str(self.request),
            **extra,
        }
        self._write(start)
        outcome = end.pop("outcome", "ok")
        duration = int(self.rng.expovariate(1 / 40))
        # bytes produced; one call in 200 produces more than MAX_OUTPUT and is returned cut
        produced = self.rng.randint(0, 4000) if self.rng.random() > 0.005 else self.rng.randint(70_000, 5_000_000)
        record = start | {
            "ts": self.clock.tick(duration),
            "phase": "end",
            "outcome": outcome,
            "duration_ms": duration,
            "output_sha256": _digest(call_id, "out"),
            "output_len": produced + 9 if produced <= 65536 else 65536 + 90,
            "raw_sha256": _digest(call_id, "raw"),
            "raw_len": produced,
            **end,
        }
        record.pop("decision")
        self._write(record)
        return call_id

    def refused(
        self, tool: str, arguments: dict[str, Any], client: str, tier: int, outcome: str, reason: str, **fields: Any
    ) -> str:
        """A call refused before it ran: its end record alone."""
        call_id = self._call_id()
        self.request += 1
        record = self._common(tool, tier, client) | {
            "phase": "end",
            "call_id": call_id,
            "args": audit_arguments(arguments),
            "request_id": str(self.request),
            "outcome": outcome,
            "denied": outcome == "denied",
            "duration_ms": 0,
            "reason": reason,
            "output_sha256": _digest(call_id, "out"),
            "output_len": 60,
            "raw_len": 0,
            "raw_sha256": hashlib.sha256(b"").hexdigest(),
            **fields,
        }
        self._write(record)
        return call_id

    def shell_exec(self, client: str) -> None:
        command = self.rng.choice(self.commands)
        tier = self.rng.choice([0, 0, 1, 1, 1, 2])
        roll = self.rng.random()
        execs = self.execs(command)
        if roll < 0.05:
            self.refused("shell_exec", {"command": command}, client, 2, "denied", "matches deny pattern '^rm -rf'")
        elif roll < 0.07:
            self.call(
                "shell_exec",
                {"command": command, "timeout": 30},
                client,
                tier,
                outcome="timeout",
                signal="SIGTERM",
                execs=execs,
            )
        elif roll < 0.17:
            self.call(
                "shell_exec",
                {"command": command},
                client,
                tier,
                outcome="exit_nonzero",
                exit_code=self.rng.choice([1, 2, 127]),
                execs=execs,
            )
        else:
            self.call("shell_exec", {"command": command, "cwd": "/srv/app"}, client, tier, exit_code=0, execs=execs)

    def session(self, client: str) -> None:
        session_id = f"s-{self.rng.getrandbits(48):012x}"
        command = "bash --norc"
        self.call(
            "shell_spawn",
            {"command": command, "until": "\\$ $"},
            client,
            1,
            session_id=session_id,
            execs=self.execs(command),
        )
        for _ in range(3):
            line = self.rng.choice(self.commands)
            self.call(
                "session_send",
                {"session_id": session_id, "data": line, "until": "\\$ $"},
                client,
                1,
                session_id=session_id,
                execs=self.execs(line),
            )
        self.call("session_recv", {"session_id": session_id}, client, 0, session_id=session_id)
        self.call("session_kill", {"session_id": session_id}, client, 1, session_id=session_id, signal="SIGHUP")
        record = self._common("session:end", 0, client) | {
            "outcome": "ok",
            "args": {},
            "duration_ms": 5000,
            "session_id": session_id,
            "exit_code": None,
            "signal": "SIGHUP",
            "reason": "closed by session_kill (SIGTERM)",
            "raw_len": 4000,
            "transcript_sha256": _digest(session_id),
            "transcript_truncated": False,
            "transcript_error": None,
        }
        self._write(record)

    def fanout(self, client: str) -> None:
        hosts = self.rng.sample(HOSTS, self.rng.randint(2, 6))
        target = {
            "hosts": [
                {
                    "host": host,
                    "address": f"10.0.0.{index + 10}",
                    "port": 22,
                    "user": "ops",
                    "host_key_mode": "strict",
                    "status": "ok" if index else "failed",
                }
                for index, host in enumerate(hosts)
            ]
        }
        self.call(
            "ssh_fanout",
            {"command": "systemctl is-active app", "hosts": ",".join(hosts)},
            client,
            1,
            target=target,
            outcome="exit_nonzero",
        )

    def ssh_exec(self, client: str) -> None:
        host = self.rng.choice(HOSTS)
        target = {"host": host, "address": "10.0.0.9", "port": 22, "user": "ops", "host_key_mode": "strict"}
        self.call(
            "ssh_exec", {"command": self.rng.choice(self.commands), "host": host}, client, 1, target=target, exit_code=0
        )

    def confirmed(self, client: str) -> None:
        confirmation = _digest("confirm", self.calls)
        arguments = {"command": "shred -u /srv/app/old.db", "cwd": "/srv/app"}
        self.refused(
            "shell_exec", arguments, client, 3, "confirm_required", "shred destroys data", confirmation=confirmation
        )
        self.call("operation_confirm", {"confirmation": confirmation}, client, 0, confirmation=confirmation)
        self.call(
            "shell_exec",
            arguments,
            client,
            3,
            decision="confirmed",
            confirmation=confirmation,
            exit_code=0,
            execs=self.execs(arguments["command"]),
        )

    def read(self, client: str) -> None:
        tool = self.rng.choice(["server_info", "audit_tail", "session_list", "ssh_hosts"])
        call_id = self._call_id()
        record = self._common(tool, 0, client) | {
            "phase": "end",
            "call_id": call_id,
            "args": {},
            "outcome": "ok",
            "duration_ms": 3,
            "output_sha256": _digest(call_id),
            "output_len": 900,
            "raw_sha256": _digest(call_id, 1),
            "raw_len": 900,
        }
        self._write(record)


def write_log(path: Path, calls: int, seed: int = 29, public_key: Path | None = None) -> int:
    """Write a log of `calls` calls or a few more (a session is six calls); returns the number written. With
    `public_key`, the checkpoints' public key is written there (for --public-key)."""
    writer = LogWriter(path, seed)
    if public_key is not None:
        public_key.write_bytes(writer.key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    rng = writer.rng
    writer.server_start("guarded")
    restart_every = max(1, calls // 3)
    try:
        while writer.calls < calls:
            if writer.calls and writer.calls % restart_every < 6 and writer.number > 6:
                writer.server_start(rng.choice(["guarded", "open"]))
            client = rng.choice(CLIENTS)
            roll = rng.random()
            for kind, below in _MIX:
                if roll < below:
                    getattr(writer, kind)(client)
                    break
    finally:
        writer.close()
    return writer.calls


_MIX = [
    ("session", 0.02),
    ("fanout", 0.05),
    ("ssh_exec", 0.10),
    ("confirmed", 0.11),
    ("read", 0.18),
    ("shell_exec", 1.0),
]


def lines(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        yield from handle
