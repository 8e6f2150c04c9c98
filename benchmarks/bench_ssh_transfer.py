"""1 GiB ssh_upload and ssh_download through a real stdio client against a real sshd: throughput vs `scp` of the
same file between the same endpoints in the same run (≥ 0.9× each way).

scp is OpenSSH's own client (since OpenSSH 9.0 it speaks SFTP to the same sftp-server); it runs with the fleet's
ssh_config (`-F`, so the same host alias, user, client key and known_hosts as relay-shell), its default cipher
and options, and pays its own connect and login on every copy (~40 ms, about 1% of a copy here). relay-shell's
pooled connection is warm (a first call opened it). The rounds interleave (scp up, relay-shell up, scp down,
relay-shell down, the order flipping every round) so machine noise hits both sides alike; medians are compared.

Files live on tmpfs (/dev/shm) when there is one: writing 1 GiB to this machine's disk makes its writeback, not
either program, the bottleneck, and its timing swings by 2× from run to run. The source is random bytes (64 MiB
repeated), so nothing compresses. Every copy is checked (size and SHA-256) so a fast wrong answer cannot pass.

A one-file download comes over the remote `scp -f` (ADR 0029); for information the run also downloads a tree
holding the same file, which comes over SFTP reads, so both of relay-shell's read paths are measured against
the same scp in the same run. Also for information: the server's peak RSS growth during the transfers (the
test suite asserts the ≤ 32 MiB bound), scp with relay-shell's preferred cipher (aes256-gcm), to show what the
cipher is worth, and the CPU seconds each side spent per GiB on this machine (relay-shell's server process;
scp and its ssh), which a loaded machine distorts less than wall time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import anyio

from benchmarks.common import (
    SSH_DOWNLOAD,
    Options,
    Row,
    child_pid_running,
    median,
    ratio_row,
    relay_client,
    reset_peak_rss,
    run_alone,
    status_kib,
    verdict,
)
from tests.sshd import SshFleet  # run as `python -m benchmarks.…` from the project root, like the others

SIZE = 1024**3
PATTERN = 64 * 1024**2
ROUNDS = 5
LIMIT = 0.9
HOST = "h01"
TIMEOUT = 600


def scratch_root() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and shutil.disk_usage("/dev/shm").free > 4 * SIZE else None


def process_cpu_seconds(pid: int) -> float:
    """User and system CPU time of a running process (all its threads)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_source(path: Path) -> str:
    pattern = os.urandom(PATTERN)
    digest = hashlib.sha256()
    with path.open("wb") as out:
        for _ in range(SIZE // PATTERN):
            out.write(pattern)
            digest.update(pattern)
    return digest.hexdigest()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def scp(fleet: SshFleet, source: str, destination: str, *options: str, cpu: list[float] | None = None) -> float:
    command = ["scp", "-q", "-F", str(fleet.ssh_config), "-o", "BatchMode=yes", *options, source, destination]
    before = os.times()
    started = time.perf_counter()
    subprocess.run(command, check=True)
    elapsed = time.perf_counter() - started
    after = os.times()
    if cpu is not None:  # scp and the ssh it ran, both waited for
        cpu.append(after.children_user - before.children_user + after.children_system - before.children_system)
    return elapsed


async def measure_rows() -> list[Row]:
    with (
        tempfile.TemporaryDirectory(prefix="bench-ssh-transfer-", dir=scratch_root()) as root,
        SshFleet(Path(root) / "fleet", 1) as fleet,
    ):
        fleet.trust()
        work = Path(root)
        source = work / "source.bin"
        expected = write_source(source)
        uploaded = work / "uploaded.bin"  # the "remote" side: same machine, through sshd
        downloaded = work / "downloaded.bin"
        remote_source = f"{HOST}:{source}"
        tree = work / "tree"  # a directory holding the source: downloaded recursively, it comes over SFTP
        tree.mkdir()
        os.link(source, tree / "source.bin")
        downloaded_tree = work / "downloaded-tree"
        samples: dict[str, list[float]] = {"scp up": [], "relay up": [], "scp down": [], "relay down": []}
        extra: dict[str, list[float]] = {"scp-gcm up": [], "scp-gcm down": [], "relay down sftp": []}
        cpu: dict[str, list[float]] = {name: [] for name in [*samples, "relay down sftp"]}
        growth_kib = 0
        async with relay_client(ssh_config=str(fleet.ssh_config)) as relay:
            server = child_pid_running("relay_shell")
            warm = await relay.call_tool("ssh_exec", {"host": HOST, "command": "true"})
            assert not warm.is_error, warm

            async def relay_copy(tool: str, local: Path, remote: Path, name: str, recursive: bool = False) -> float:
                arguments = {"host": HOST, "local_path": str(local), "remote_path": str(remote), "timeout": TIMEOUT}
                if recursive:
                    arguments["recursive"] = True
                before = process_cpu_seconds(server)
                started = time.perf_counter()
                result = await relay.call_tool(tool, arguments)
                elapsed = time.perf_counter() - started
                cpu[name].append(process_cpu_seconds(server) - before)
                assert not result.is_error, result
                return elapsed

            def check(path: Path) -> None:
                assert path.stat().st_size == SIZE and sha256_of(path) == expected, f"{path} is not the source"
                path.unlink()

            for round_number in range(ROUNDS):
                baseline_kib = status_kib(server, "VmRSS")
                reset_peak_rss(server)
                steps = [
                    ("scp up", lambda: scp(fleet, str(source), f"{HOST}:{uploaded}", cpu=cpu["scp up"]), uploaded),
                    ("relay up", None, uploaded),
                    ("scp down", lambda: scp(fleet, remote_source, str(downloaded), cpu=cpu["scp down"]), downloaded),
                    ("relay down", None, downloaded),
                ]
                if round_number % 2:
                    steps = [steps[1], steps[0], steps[3], steps[2]]
                for name, run_scp, produced in steps:
                    if run_scp is not None:
                        samples[name].append(run_scp())
                    elif name == "relay up":
                        samples[name].append(await relay_copy("ssh_upload", source, uploaded, name))
                    else:
                        samples[name].append(await relay_copy("ssh_download", downloaded, source, name))
                    check(produced)
                sftp_down = await relay_copy("ssh_download", downloaded_tree, tree, "relay down sftp", recursive=True)
                extra["relay down sftp"].append(sftp_down)
                check(downloaded_tree / "source.bin")
                downloaded_tree.rmdir()
                growth_kib = max(growth_kib, status_kib(server, "VmHWM") - baseline_kib)
                gcm = ("-c", "aes256-gcm@openssh.com")
                extra["scp-gcm up"].append(scp(fleet, str(source), f"{HOST}:{uploaded}", *gcm))
                check(uploaded)
                extra["scp-gcm down"].append(scp(fleet, remote_source, str(downloaded), *gcm))
                check(downloaded)

    def rate(name: str, table: dict[str, list[float]]) -> float:
        return SIZE / median(table[name]) / 1e6

    measured: list[Row] = []
    for direction in ("up", "down"):
        ours, floor = rate(f"relay {direction}", samples), rate(f"scp {direction}", samples)
        ratio = ours / floor
        what = "upload" if direction == "up" else "download"
        name = SSH_DOWNLOAD if direction == "down" else "ssh_upload 1 GiB vs scp"
        measured.append(ratio_row(name, ratio, LIMIT, higher_is_better=True))
        print(
            f"ssh {what} 1 GiB: relay-shell {ours:.0f} MB/s, scp {floor:.0f} MB/s, ratio {ratio:.3f} "
            f"(target ≥ {LIMIT}) {verdict(ratio, LIMIT, higher_is_better=True)}"
        )
    sftp_ratio = rate("relay down sftp", extra) / rate("scp down", samples)
    print(
        f"  (for information: a tree holding the same file, read over SFTP, {rate('relay down sftp', extra):.0f} MB/s"
        f" down, ratio {sftp_ratio:.3f}; CPU seconds per GiB: relay-shell "
        f"{median(cpu['relay up']):.2f} up, {median(cpu['relay down']):.2f} down (scp -f), "
        f"{median(cpu['relay down sftp']):.2f} down (SFTP); scp with its ssh {median(cpu['scp up']):.2f} up, "
        f"{median(cpu['scp down']):.2f} down)"
    )
    print(
        f"  (for information: scp with aes256-gcm {rate('scp-gcm up', extra):.0f} MB/s up, "
        f"{rate('scp-gcm down', extra):.0f} MB/s down; relay-shell server peak RSS growth {growth_kib / 1024:.1f} MiB"
        f"; files on {scratch_root() or 'the temp dir'})"
    )
    return measured


def rows(options: Options) -> list[Row]:
    return anyio.run(measure_rows)


def main(argv: list[str] | None = None) -> int:
    return run_alone(rows, argv)


if __name__ == "__main__":
    raise SystemExit(main())
