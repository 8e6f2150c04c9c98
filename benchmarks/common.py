"""Helpers shared by the benchmarks: start relay-shell or the bare floor server over real stdio, the relay-shell of
an earlier commit for side-by-side rows (`--before REV`), and the rows `run_all` prints in its table.

How a benchmark plugs into `run_all` (the shape every benchmark module keeps, whoever owns it):

- `rows(options: Options) -> list[Row]` runs the benchmark, prints its detail lines as it goes, and returns one
  `Row(name, value, target, passed)` per target, `value` and `target` as text to print (`ratio_row` formats a
  ratio against a limit). A row of issue 27's table is returned under its name in `ISSUE_27_ROWS` (import the
  constant, so the names cannot drift); `run_all` lists every row of that table, and one that no benchmark
  returned as missed ("not measured").
- `main(argv=None) -> int` is the command line: `return run_alone(rows, argv)` (the same rows and table, exit
  1 when a target is missed).
- `options.before` (`--before REV`) is a commit to measure side by side with this checkout, for a row of the
  form "no slower than before this change": `code_at(options.before)` gives its relay-shell (see ServerCode), to
  pass as `code=` to `relay_params`/`relay_client`. A benchmark with no such row ignores it.
"""

from __future__ import annotations

import argparse
import atexit
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from mcp import Client
from mcp.client.stdio import StdioServerParameters

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent

# main before the renovation (issue 25): the default "before" of run_all, for the renovation's side-by-side rows.
RENOVATION_BASE = "e1d093d"

# Issue 27's table, row by row, as run_all prints it: the benchmark that measures a row returns it under exactly
# this name (its module named beside it, so a row nobody returned says where to look).
TRACE_TRUE = "shell_exec true, trace on vs off"
TRACE_THOUSAND = "1,000 programs in one call, trace on vs off"
STARTUP = "spawn → initialize vs a bare MCP server"
IDLE_RSS = "idle RSS vs a bare MCP server"
FANOUT_32_COLD = "fan-out, 32 hosts, default concurrency, cold, vs the asyncio floor"
HTTP_THROUGHPUT = "HTTP, 8 clients, calls/s vs the bare server"
SSH_DOWNLOAD = "ssh_download 1 GiB vs scp"
REPL_BACK_TO_BACK = "REPL step, back-to-back batches"
ISSUE_27_ROWS = {
    TRACE_TRUE: "bench_exec_trace",
    TRACE_THOUSAND: "bench_exec_trace",
    STARTUP: "bench_startup",
    IDLE_RSS: "bench_startup",
    FANOUT_32_COLD: "bench_ssh_fanout",
    HTTP_THROUGHPUT: "bench_http",
    SSH_DOWNLOAD: "bench_ssh_transfer",
    REPL_BACK_TO_BACK: "bench_session_repl",
}


class Row(NamedTuple):
    """One line of run_all's table: what was measured, the value and the target as printed, and the verdict."""

    name: str
    value: str
    target: str
    passed: bool


def ratio_row(name: str, ratio: float, limit: float, higher_is_better: bool = False) -> Row:
    passed = ratio >= limit if higher_is_better else ratio <= limit
    return Row(name, f"{ratio:.3f}×", f"{'≥' if higher_is_better else '≤'} {limit:.2f}×", passed)


@dataclass(frozen=True)
class Options:
    before: str | None = None  # a commit whose relay-shell is measured side by side (rows "vs before")


def parse_options(argv: list[str] | None, before_default: str | None = None) -> Options:
    parser = argparse.ArgumentParser(add_help=True)
    parser.add_argument(
        "--before",
        metavar="REV",
        default=before_default,
        help="also measure the relay-shell of commit REV, extracted from this repository into a temporary directory "
        "(rows of the form 'vs before'); 'none' to skip",
    )
    known, _ = parser.parse_known_args(argv)
    return Options(before=None if known.before in (None, "", "none") else known.before)


def print_table(rows: list[Row], marks: dict[str, str] | None = None) -> None:
    """The rows, each with its value, target and PASS or MISS; `marks` puts a note before a row's name."""
    marks = marks or {}
    names = [marks.get(row.name, "") + row.name for row in rows]
    width = max([len(name) for name in names] + [4])
    value_width = max([len(row.value) for row in rows] + [5])
    target_width = max([len(row.target) for row in rows] + [6])
    print(f"{'row':<{width}}  {'value':>{value_width}}  {'target':<{target_width}}  verdict")
    for name, row in zip(names, rows, strict=True):
        verdict = "PASS" if row.passed else "MISS"
        print(f"{name:<{width}}  {row.value:>{value_width}}  {row.target:<{target_width}}  {verdict}")


def run_alone(rows: Callable[[Options], list[Row]], argv: list[str] | None = None) -> int:
    """A benchmark's command line: its rows, then its table; exit 1 when a target is missed."""
    measured = rows(parse_options(sys.argv[1:] if argv is None else argv))
    print()
    print_table(measured)
    return 0 if all(row.passed for row in measured) else 1


# -- the relay-shell under test --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerCode:
    """The relay-shell a benchmark starts: this checkout, or an earlier commit extracted into a temporary directory
    and compiled as an installation would be. The server runs with `root` as its working directory, which
    `python -m` puts first on sys.path, so it imports that tree's own `relay_shell` (the virtual environment's
    editable install, this checkout, comes after). Each tree has its own XDG_CACHE_HOME, so its tool-schema cache
    stays warm: servers of two trees sharing one cache file would each find the other's key there and rebuild."""

    label: str
    root: Path
    cache_home: Path

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "XDG_CACHE_HOME": str(self.cache_home)}

    def argv(self) -> list[str]:
        return [sys.executable, "-m", "relay_shell"]


_THIS: list[ServerCode] = []


def this_code() -> ServerCode:
    """This checkout, compiled as installed (see `compiled`), with a private schema cache for the whole run."""
    if not _THIS:
        compiled(CHECKOUT)
        cache_home = Path(tempfile.mkdtemp(prefix="relay-shell-bench-cache-"))
        atexit.register(shutil.rmtree, cache_home, True)
        _THIS.append(ServerCode("this checkout", CHECKOUT, cache_home))
    return _THIS[0]


@contextmanager
def code_at(rev: str) -> Iterator[ServerCode]:
    """The relay-shell of commit `rev` (git archive of this repository), compiled, for as long as the block runs.
    The virtual environment's packages serve both trees: a benchmark comparing them assumes the dependencies did
    not change between them (checked by `pyproject.toml`'s dependencies being equal)."""
    directory = Path(tempfile.mkdtemp(prefix="relay-shell-before-"))
    try:
        archive = subprocess.run(
            ["git", "-C", str(CHECKOUT), "archive", "--format=tar", rev, "relay_shell", "pyproject.toml"],
            capture_output=True,
            check=False,
        )
        if archive.returncode != 0:
            raise RuntimeError(f"cannot extract {rev}: {archive.stderr.decode(errors='replace').strip()}")
        subprocess.run(["tar", "-x", "-C", str(directory)], input=archive.stdout, check=True)
        if _dependencies(directory / "pyproject.toml") != _dependencies(CHECKOUT / "pyproject.toml"):
            raise RuntimeError(f"{rev} declares other dependencies than this checkout: measure it in its own venv")
        compiled(directory)
        code = ServerCode(f"before ({rev})", directory, directory / ".cache")
        imported = subprocess.run(
            [sys.executable, "-c", "import relay_shell; print(relay_shell.__file__)"],
            cwd=directory,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not imported.startswith(str(directory)):
            raise RuntimeError(f"the tree of {rev} imports relay_shell from {imported}, not its own")
        yield code
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def compiled(root: Path) -> None:
    # As installed (pip compiles every module): with PYTHONDONTWRITEBYTECODE set, as on these machines, a tree
    # would otherwise be compiled from source at every start, while the SDK's modules were compiled at install time.
    compileall.compile_dir(str(root / "relay_shell"), quiet=1)


def _dependencies(pyproject: Path) -> object:
    import tomllib

    project = tomllib.loads(pyproject.read_text()).get("project", {})
    return project.get("dependencies"), project.get("requires-python")


def relay_params(audit_dir: str, code: ServerCode | None = None, /, **settings: str) -> StdioServerParameters:
    code = code or this_code()
    env = {key: value for key, value in os.environ.items() if not key.startswith("RELAY_SHELL_")}
    env["RELAY_SHELL_AUDIT_PATH"] = str(Path(audit_dir) / "audit.jsonl")
    env.update({f"RELAY_SHELL_{key.upper()}": value for key, value in settings.items()})
    argv = code.argv()
    return StdioServerParameters(command=argv[0], args=argv[1:], env=code.environment(env), cwd=code.root)


def bare_params() -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=[str(HERE / "bare_server.py")], env=dict(os.environ))


@asynccontextmanager
async def relay_client(code: ServerCode | None = None, /, **settings: str) -> AsyncIterator[Client]:
    with tempfile.TemporaryDirectory() as audit_dir:
        async with Client(relay_params(audit_dir, code, **settings), mode="legacy") as client:
            yield client


@asynccontextmanager
async def bare_client() -> AsyncIterator[Client]:
    async with Client(bare_params(), mode="legacy") as client:
        yield client


# -- processes -------------------------------------------------------------------------------------------------


def child_pid_running(module_hint: str) -> int:
    """The PID of our direct child whose command line mentions module_hint (the server under test)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                parent = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read().decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if parent == me and module_hint in cmdline:
            return int(entry)
    raise RuntimeError(f"no child process running {module_hint}")


def children() -> set[int]:
    """The PIDs of this process's running children."""
    me = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[1] == me:
                    found.add(int(entry))
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
    return found


@contextmanager
def new_children() -> Iterator[list[int]]:
    """The children started inside the block (a server a client spawned), listed when it ends."""
    before = children()
    started: list[int] = []
    yield started
    started += sorted(children() - before)
    if not started:
        raise RuntimeError("no child process was started")


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a running process, all its threads (ended ones too), in clock ticks' resolution:
    on a shared machine the CPU a server spends says more than the wall time its work took."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reset_peak_rss(pid: int) -> None:
    # Writing 5 to clear_refs resets VmHWM (peak RSS) so we measure the call, not the imports.
    with open(f"/proc/{pid}/clear_refs", "w") as handle:
        handle.write("5")


def median(values: list[float]) -> float:
    return statistics.median(values)


def spread(values: list[float]) -> str:
    """The middle half of the samples (25th to 75th percentile), as printed beside a median."""
    quartiles = statistics.quantiles(values, n=4)
    return f"{quartiles[0]:.3g}–{quartiles[2]:.3g}"


def verdict(ratio: float, limit: float, higher_is_better: bool = False) -> str:
    ok = ratio >= limit if higher_is_better else ratio <= limit
    return "PASS" if ok else "FAIL"


async def measure(call: Callable[[], Awaitable[object]], rounds: int) -> list[float]:
    """Wall time of `rounds` calls of `call`, one after another."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples
