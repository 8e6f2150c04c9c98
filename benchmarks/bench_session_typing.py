"""A readonly PTY step is unchanged within noise by reading typed input as what runs (issue 26, adr/0026).

Two measurements in the same run:
- a readonly session step through a real stdio client: `cat` in a terminal (tier 0 in readonly), a tier-0 line
  typed, the answer waited for with `until`: the median step and its spread (interquartile range);
- in process, what the policy spends on one typed line with the session readings (history expansion, escapes,
  programs, interactive hooks: sessions/reading.py) and with the keystrokes alone (what the policy read before),
  each line classified, over the same mix of readonly lines.

The readings' extra cost per step must be within the step's noise: at most a quarter of its interquartile range,
and at most 2% of the step.
"""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace
from typing import Any

import anyio

from benchmarks.common import median, relay_client, verdict
from relay_shell.plan import Subject
from relay_shell.policy.classify import classify
from relay_shell.sessions.reading import typed_subject
from relay_shell.sessions.typed import Typing, read_keystrokes
from relay_shell.settings.sessions import DEFAULT_PASSPROMPT

STEPS = 200
WARMUP = 10
ROUNDS = 2000  # in-process classifications of each kind
SHARE_LIMIT = 0.02
LINES = [
    "ls -la /var/log",
    "cat /etc/hostname",
    "grep -r error /var/log/syslog | tail -n 5",
    "ps aux --sort=-%mem | head",
    "df -h /",
    "journalctl -u ssh --since today --no-pager | tail",
    "find /etc -name '*.conf' -newer /etc/hostname",
    "cut -d: -f1 /etc/passwd | sort | uniq -c",
]


class _Terminal:
    def interrupt_clears_line(self) -> bool:
        return True

    def directories(self) -> tuple[str, ...]:
        return ()  # no program: no working directory (the real PTY step's readlinks are in its time)

    def line_settings(self) -> None:
        return None  # no terminal in process: the step's own tcgetattr is in the real PTY step's time


def _session() -> Any:
    return SimpleNamespace(
        typing=Typing(), history=list(LINES), open_input="", passprompt=DEFAULT_PASSPROMPT, terminal=_Terminal()
    )


def with_readings(line: str) -> int:
    subject, _ = typed_subject(_session(), line, True, [])
    return classify(subject).tier


def keystrokes_only(line: str) -> int:
    typed = read_keystrokes(Typing(), line, True, [], True)
    return classify(Subject(typed="\n".join(typed.texts))).tier


def per_line(function: Any) -> float:
    """Median seconds per line over batches of the whole mix."""
    samples = []
    for _ in range(ROUNDS // len(LINES)):
        started = time.perf_counter()
        for line in LINES:
            function(line)
        samples.append((time.perf_counter() - started) / len(LINES))
    return median(samples)


async def step_samples() -> list[float]:
    async with relay_client(policy_mode="readonly") as client:
        spawned = await client.call_tool("shell_spawn", {"command": "cat", "timeout": 5})
        assert not spawned.is_error and spawned.structured_content is not None, spawned
        session_id = spawned.structured_content["session_id"]
        samples = []
        for index in range(WARMUP + STEPS):
            line = LINES[index % len(LINES)]
            started = time.perf_counter()
            # cat copies the line back: the answer is the line after the echo.
            result = await client.call_tool(
                "session_send", {"session_id": session_id, "data": line, "until": r"\n.*\n", "timeout": 10}
            )
            elapsed = time.perf_counter() - started
            assert not result.is_error, result
            if index >= WARMUP:
                samples.append(elapsed)
        await client.call_tool("session_kill", {"session_id": session_id})
    return samples


async def main() -> bool:
    for line in LINES:  # the mix is readonly work: tier 0 both ways
        assert with_readings(line) == keystrokes_only(line) == 0, line
    old = per_line(keystrokes_only)
    new = per_line(with_readings)
    samples = await step_samples()
    step = median(samples)
    quartiles = statistics.quantiles(samples, n=4)
    spread = quartiles[2] - quartiles[0]
    extra = new - old
    share = extra / step
    noise_ok = extra <= spread / 4
    print(
        f"session typing: readonly PTY step {step * 1000:.3f} ms (interquartile range {spread * 1000:.3f} ms); "
        f"the policy's reading of a typed line {new * 1e6:.1f} µs with the session readings, {old * 1e6:.1f} µs "
        f"with the keystrokes alone: +{extra * 1e6:.1f} µs = {share:.2%} of a step (target ≤ {SHARE_LIMIT:.0%} and "
        f"≤ a quarter of the step's interquartile range) {verdict(share, SHARE_LIMIT) if noise_ok else 'FAIL'}"
    )
    return share <= SHARE_LIMIT and noise_ok


if __name__ == "__main__":
    raise SystemExit(0 if anyio.run(main) else 1)
