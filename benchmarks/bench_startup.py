"""Server start to `initialize` answered: relay-shell vs a bare MCPServer (≤ 1.15×), raw JSON-RPC over stdio."""

from __future__ import annotations

import compileall
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import HERE, median, verdict

ROUNDS = 20  # a start is ~0.8 s of mostly CPU: on a shared machine the median needs many
LIMIT = 1.15
INITIALIZE = (
    json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "0"},
            },
        }
    )
    + "\n"
)


def time_to_initialize(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(INITIALIZE)
    process.stdin.flush()
    line = process.stdout.readline()
    elapsed = time.perf_counter() - started
    assert '"result"' in line, line
    process.stdin.close()
    process.wait(timeout=10)
    return elapsed


def main() -> bool:
    # As installed (pip compiles every module): with PYTHONDONTWRITEBYTECODE set, as on these machines, an
    # editable checkout would otherwise recompile relay_shell from source at every start, while the SDK's
    # modules were compiled at install time.
    compileall.compile_dir(str(HERE.parent / "relay_shell"), quiet=1)
    with tempfile.TemporaryDirectory() as directory:
        relay_env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
        relay_env["RELAY_SHELL_AUDIT_PATH"] = str(Path(directory) / "audit.jsonl")
        relay = [sys.executable, "-m", "relay_shell"]
        bare = [sys.executable, str(HERE / "bare_server.py")]
        time_to_initialize(relay, relay_env)  # warm the page cache for both
        time_to_initialize(bare, dict(os.environ))
        relay_samples = []
        bare_samples = []
        for round_number in range(ROUNDS):
            # Alternate which starts first, so neither always follows the other's exit.
            if round_number % 2:
                relay_samples.append(time_to_initialize(relay, relay_env))
                bare_samples.append(time_to_initialize(bare, dict(os.environ)))
            else:
                bare_samples.append(time_to_initialize(bare, dict(os.environ)))
                relay_samples.append(time_to_initialize(relay, relay_env))
    ours = median(relay_samples)
    floor = median(bare_samples)
    ratio = ours / floor
    print(
        f"startup to initialize: relay-shell {ours * 1000:.0f} ms, bare {floor * 1000:.0f} ms, "
        f"ratio {ratio:.3f} (target ≤ {LIMIT}) {verdict(ratio, LIMIT)}"
    )
    return ratio <= LIMIT


if __name__ == "__main__":
    raise SystemExit(0 if main() else 1)
