"""Command line: serve (default), --check-config, audit verify, audit tail, audit report."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from relay_shell import __version__

if TYPE_CHECKING:
    from relay_shell.server import Assembly

EXIT_CONFIG = 2
EXIT_NOT_SIGNED = 4  # audit verify --public-key: an intact chain with no checkpoint in it yet


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["audit"]:
        return audit_command(args[1:])
    if args[:1] == ["token"]:
        return token_command(args[1:])
    parser = argparse.ArgumentParser(
        prog="relay-shell",
        description="Audited MCP server for shell commands. Configure with RELAY_SHELL_* environment variables.",
        epilog="Audit tools: relay-shell audit verify [PATH ...] [--public-key K] [--against COPY] | relay-shell audit "
        "tail [-n N] [--follow] ... | relay-shell audit report LOG ... -o report.html | relay-shell audit keygen "
        "PATH | HTTP tokens: relay-shell token NAME",
    )
    parser.add_argument("--version", action="version", version=f"relay-shell {__version__}")
    parser.add_argument("--check-config", action="store_true", help="validate the configuration and exit")
    parser.add_argument("--transport", choices=["stdio", "http"], help="override RELAY_SHELL_TRANSPORT")
    options = parser.parse_args(args)
    if options.transport:
        import os

        os.environ["RELAY_SHELL_TRANSPORT"] = options.transport
    return serve(check_only=options.check_config)


def serve(check_only: bool) -> int:
    from relay_shell.audit.log import AuditLog, AuditWriteError, check_writable
    from relay_shell.config import ConfigError, Settings, load_settings, metrics_host_port, unknown_variables

    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"relay-shell: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    for name in unknown_variables():
        print(f"relay-shell: warning: {name} is not a relay-shell setting (typo?); ignored", file=sys.stderr)

    if check_only:
        problem = check_writable(settings.audit_path)
        if problem is not None:
            print(f"relay-shell: configuration error: RELAY_SHELL_AUDIT_PATH: {problem}", file=sys.stderr)
            return EXIT_CONFIG
        if settings.transport == "http":  # the token file, the OAuth state and the bind address
            from relay_shell.auth.setup import check_http_settings

            try:
                check_http_settings(settings)
            except ConfigError as exc:
                print(f"relay-shell: configuration error: {exc}", file=sys.stderr)
                return EXIT_CONFIG
        if settings.audit_signing_key is not None:
            from relay_shell.audit.keys import KeyFileError, load_signing_key

            try:
                load_signing_key(settings.audit_signing_key)
            except KeyFileError as exc:
                print(f"relay-shell: configuration error: RELAY_SHELL_AUDIT_SIGNING_KEY: {exc}", file=sys.stderr)
                return EXIT_CONFIG
        if settings.audit_syslog.startswith("tls://"):  # the CA and client certificate files hold usable PEM
            from relay_shell.audit.offhost import syslog_tls

            try:
                syslog_tls(settings)
            except ConfigError as exc:
                print(f"relay-shell: configuration error: {exc}", file=sys.stderr)
                return EXIT_CONFIG
        print(f"relay-shell {__version__}: configuration OK (audit log {settings.audit_path} is writable)")
        return 0

    audit_log = AuditLog(settings.audit_path, chain=settings.audit_chain, fsync=settings.audit_fsync == "always")
    try:
        audit_log.open()
    except AuditWriteError as exc:
        if settings.audit_on_failure == "refuse":
            print(f"relay-shell: configuration error: RELAY_SHELL_AUDIT_PATH: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        print(f"relay-shell: warning: {exc}; serving degraded (AUDIT_ON_FAILURE=continue)", file=sys.stderr)

    offhost = None
    if settings.audit_syslog or settings.audit_journald != "off" or settings.audit_signing_key is not None:
        from relay_shell.audit.offhost import OffHost

        try:
            offhost = OffHost(settings, audit_log)
        except ConfigError as exc:
            print(f"relay-shell: configuration error: {exc}", file=sys.stderr)
            return EXIT_CONFIG

    from relay_shell.auth.setup import HttpAuth

    http_auth = HttpAuth()
    if settings.transport == "http":
        from relay_shell.auth.setup import check_http_settings

        try:
            http_auth = check_http_settings(settings)
        except ConfigError as exc:
            print(f"relay-shell: configuration error: {exc}", file=sys.stderr)
            return EXIT_CONFIG
    from relay_shell.containment.units import ContainmentStart, ContainmentUnavailable, scope_of

    # Its cgroup setup waits in the kernel (~10 ms) in a thread while the server's modules are imported; the
    # containment is complete (result()) before anything below runs a process or looks for leftovers.
    containment_start = ContainmentStart(settings.containment, scope_of(settings.audit_path))
    try:
        from relay_shell.audit.interrupted import find_interrupted, restart_fields
        from relay_shell.containment.leftovers import find_leftovers
        from relay_shell.server import build_server

        raise_open_files_limit()  # before build_server: the port forwards' connection budget is derived from it
    except BaseException:
        containment_start.cancel()  # the thread may have moved this process into a new instance directory
        raise
    try:
        containment = containment_start.result()
    except ContainmentUnavailable as exc:
        print(
            f"relay-shell: configuration error: RELAY_SHELL_CONTAINMENT={settings.containment}: {exc}; allowed: "
            f"{Settings.model_fields['containment'].description}",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    # What a server of this audit log killed with -9 left running: the processes of the calls it left
    # interrupted (start records without end records) are ended, background jobs of calls that ended are kept.
    previous = find_interrupted(settings.audit_path)  # before this process writes its own server:start record
    interrupted = {call.call_id for call in previous.interrupted} if previous.complete else None
    leftovers = find_leftovers(containment, interrupted_call_ids=interrupted)
    for leftover in leftovers:
        action = "ended" if leftover.ended else "kept"
        print(
            f"relay-shell: left by server {leftover.instance}: {leftover.unit}, {len(leftover.pids)} "
            f"process(es) {action}: {leftover.reason}",
            file=sys.stderr,
        )
    assembly = build_server(settings, audit_log, http_auth.tokens, http_auth.oauth, containment, offhost)
    restart = restart_fields(previous, [leftover.record() for leftover in leftovers])
    # The policy in force, for the auditor's report (adr/0023): a log says which rules each of its servers applied.
    policy = {
        "mode": settings.policy_mode,
        "confirm_tier3": settings.confirm_tier3,
        "exec_trace": settings.exec_trace,
        "gate": settings.gate,
    }
    assembly.runner.server_started({**restart, "policy": policy})
    if offhost is not None:  # after server:start: the first record this process ships or signs is its own start
        offhost.start()
    if not audit_log.healthy:
        assembly.metrics.audit_degraded.set(1)
    metrics_note = "off"
    if settings.metrics_addr:
        host, port = metrics_host_port(settings.metrics_addr)
        try:
            assembly.metrics_port = assembly.metrics.serve(host, port)
        except OSError as exc:
            print(f"relay-shell: configuration error: RELAY_SHELL_METRICS_ADDR: cannot listen: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        metrics_note = f"http://{host}:{assembly.metrics_port}/metrics"
    chain = "on" if settings.audit_chain else "off"
    print(
        f"relay-shell {__version__} | transport {settings.transport} | policy {settings.policy_mode} | "
        f"audit {settings.audit_path} (chain {chain}) | metrics {metrics_note} | containment {containment.mode} | "
        f"exec trace {assembly.containment.tracer.state if assembly.containment.tracer else 'off'}"
        + (f" | {offhost.startup_note()}" if offhost is not None else ""),
        file=sys.stderr,
        flush=True,
    )
    if assembly.containment.tracer is not None and assembly.containment.tracer.state == "unavailable":
        print(f"relay-shell: exec trace unavailable: {assembly.containment.tracer.reason}", file=sys.stderr, flush=True)
    elif assembly.containment.tracer is not None and assembly.containment.tracer.no_new_privs:
        print(f"relay-shell: exec trace: {assembly.containment.tracer.reason}", file=sys.stderr, flush=True)
    if settings.transport == "http":
        from relay_shell.http import serve_http

        try:
            serve_http(assembly, settings, http_auth)
        except OSError as exc:
            print(f"relay-shell: configuration error: RELAY_SHELL_HTTP_PORT: cannot listen: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        finally:
            audit_log.close()
        return 0
    print(
        "relay-shell: speaking MCP on stdin/stdout; connect by registering the command `relay-shell` in your "
        "MCP client (e.g. `claude mcp add relay-shell -- relay-shell`)",
        file=sys.stderr,
        flush=True,
    )
    import anyio

    try:
        anyio.run(_serve_stdio, assembly)
    except KeyboardInterrupt:
        pass
    finally:
        audit_log.close()
    return 0


def raise_open_files_limit() -> None:
    """Raise the soft limit on open files (RLIMIT_NOFILE) to the hard limit. Every command, session, SSH
    connection and forwarded connection holds descriptors, and the usual soft limit of 1024 is kept low only for
    programs that use select(), which asyncio does not; port forwards may use half of the limit (ssh/forwards/traffic.py
    `connection_budget`), so a low one would starve them or, without that bound, everything else. Children
    inherit the raised limit. An operator's lower hard limit (LimitNOFILE=) still holds."""
    import contextlib
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 1 << 20  # Linux caps descriptors at fs.nr_open anyway
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


async def _serve_stdio(assembly: Assembly) -> None:
    """Serve until the client closes stdin or a signal (TERM, HUP, INT) arrives; then close every session,
    so no shell or job outlives the server."""
    import signal

    import anyio

    from relay_shell.stdio import stdio_transport

    async with anyio.create_task_group() as group:

        async def stop_on_signal() -> None:
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP, signal.SIGINT) as received:
                async for _ in received:
                    await assembly.shutdown()
                    group.cancel_scope.cancel()
                    return

        group.start_soon(stop_on_signal)
        group.start_soon(assembly.containment.maintain_forever)
        server = assembly.mcp._lowlevel_server  # the SDK's own in-memory client reaches it the same way
        try:
            async with stdio_transport() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())
        finally:
            await assembly.shutdown()
            group.cancel_scope.cancel()


def token_command(args: list[str]) -> int:
    """A new random bearer token for the HTTP transport: the token goes to the client, the line to TOKEN_FILE."""
    import hashlib
    import re
    import secrets

    parser = argparse.ArgumentParser(prog="relay-shell token", description="Create a bearer token for a client.")
    parser.add_argument("name", help="the client's name, as the audit log will show it (letters, digits, _.@-)")
    options = parser.parse_args(args)
    if not re.fullmatch(r"[A-Za-z0-9_.@-]{1,64}", options.name):
        print("relay-shell token: NAME must be 1 to 64 letters, digits or _.@-", file=sys.stderr)
        return EXIT_CONFIG
    token = secrets.token_urlsafe(32)
    print(f"token for the client (shown once, keep it secret): {token}", file=sys.stderr)
    print(f"{options.name} {hashlib.sha256(token.encode()).hexdigest()}")
    return 0


def audit_command(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="relay-shell audit", description="Inspect the audit log.")
    sub = parser.add_subparsers(dest="action", required=True)
    verify = sub.add_parser("verify", help="verify the hash chain (exit 0 only for a complete valid chain)")
    verify.add_argument("paths", nargs="*", type=Path, help="log file(s), oldest first; default: the configured log")
    verify.add_argument(
        "--public-key",
        type=Path,
        action="append",
        help="check every audit:checkpoint's Ed25519 signature with this key (PATH.pub); give it again for the "
        "keys of earlier periods (each checkpoint names its key); exit 4 when the chain is intact but holds no "
        "checkpoint yet",
    )
    verify.add_argument(
        "--against",
        type=Path,
        metavar="COPY",
        help="compare with the collector's copy: exit 1 for records missing locally (tail truncation, rewritten "
        "history, a replaced file), 3 for records missing remotely only (lag or loss), 2 for a copy that cannot "
        "be read or holds no audit record",
    )
    keygen = sub.add_parser("keygen", help="write an Ed25519 key for signed checkpoints: PATH (0600) and PATH.pub")
    keygen.add_argument("path", type=Path, help="the private key file to create (AUDIT_SIGNING_KEY)")
    tail = sub.add_parser("tail", help="print recent records as JSON lines")
    tail.add_argument("-n", "--lines", type=int, default=20, help="number of records (default 20)")
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new records")
    tail.add_argument("--tool", help="only this tool")
    tail.add_argument("--tier", type=int, choices=[0, 1, 2, 3], help="only this tier")
    tail.add_argument("--denied", action="store_true", help="only denied calls")
    tail.add_argument("--call-id", help="only the records of this call (its start and end)")
    tail.add_argument("--path", type=Path, help="log file; default: the configured log")
    tail.add_argument(
        "--execs", action="store_true", help="only records with an exec trace, printed as their exec lists"
    )
    from relay_shell.report import command as report

    report.add_parser(sub)
    options = parser.parse_args(args)

    if options.action == "report":
        return report.run(options)
    if options.action == "verify":
        return verify_command(options.paths or [_configured_audit_path()], options.public_key, options.against)
    if options.action == "keygen":
        from relay_shell.audit.keys import KeyFileError, generate_keypair

        try:
            public = generate_keypair(options.path)
        except (KeyFileError, OSError) as exc:
            print(f"relay-shell audit keygen: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        print(f"private key: {options.path} (0600; RELAY_SHELL_AUDIT_SIGNING_KEY={options.path})")
        print(f"public key:  {public} (for relay-shell audit verify --public-key; keep a copy off this host)")
        return 0

    from relay_shell.audit.tail import TailFilter, exec_lines, follow_records, recent_records

    if options.lines < 1:
        parser.error("-n must be at least 1")
    path = options.path or _configured_audit_path()
    record_filter = TailFilter(
        tool=options.tool, tier=options.tier, denied=True if options.denied else None, call_id=options.call_id
    )
    if not path.exists():
        print(f"relay-shell: audit log {path} does not exist", file=sys.stderr)
        return 1
    record_filter = replace(record_filter, execs=True) if options.execs else record_filter

    def show(record: dict[str, Any]) -> str:
        return "\n".join(exec_lines(record)) + "\n" if options.execs else orjson.dumps(record).decode() + "\n"

    for record in recent_records(path, options.lines, record_filter):
        sys.stdout.write(show(record))
    sys.stdout.flush()
    if options.follow:
        try:
            for record in follow_records(path, record_filter):
                sys.stdout.write(show(record))
                sys.stdout.flush()
        except KeyboardInterrupt:
            pass
    return 0


def verify_command(paths: list[Path], public_key_paths: list[Path] | None, against: Path | None) -> int:
    """Exit 0: intact (and signed, and matching the copy); 1: the local log fails, or records are missing locally;
    2: a key or copy that cannot be read, or a copy without any audit record; 3: the local log is intact but the
    copy lacks records (lag or loss); 4: the chain is intact but no checkpoint is in it yet (--public-key)."""
    from relay_shell.audit.against import LocalChains, compare, read_copy
    from relay_shell.audit.checkpoint import CHECKPOINT_TOOL, check_checkpoint
    from relay_shell.audit.keys import KeyFileError, key_id, load_public_key
    from relay_shell.audit.verify import verify_files

    keys = {}
    for public_key_path in public_key_paths or []:
        try:
            loaded = load_public_key(public_key_path)
        except KeyFileError as exc:
            print(f"relay-shell audit verify: --public-key: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        keys[key_id(loaded)] = loaded
    public_key = next(iter(keys.values()), None)
    local = LocalChains()
    signed: list[int] = []
    last_seq = [-1]

    def check(record: dict[str, Any]) -> str | None:
        last_seq[0] = int(record["seq"])
        if public_key is not None and record.get("tool") == CHECKPOINT_TOOL:
            problem = check_checkpoint(record, keys.get(str(record.get("key_id")), public_key))
            if problem is not None:
                return problem
            signed.append(int(record["seq"]))
        if against is not None:
            local(record)
        return None

    result = verify_files(paths, check if public_key is not None or against is not None else None)
    if not result.ok:
        print(f"FAILED: {result.message}", file=sys.stderr)
        return 1
    print(result.report())
    if public_key is not None:
        if not signed:
            print(
                "NOT SIGNED YET: the chain is intact but holds no audit:checkpoint record, so nothing is signed: a "
                "young server (fewer records than the interval and not yet shut down) or a freshly rotated file "
                "(the checkpoints are in the older one: verify the files together, oldest first). A rewritten log "
                "without its checkpoints looks the same: compare with the collector's copy (--against)",
                file=sys.stderr,
            )
            return EXIT_NOT_SIGNED
        uncovered = last_seq[0] - signed[-1]
        note = "" if uncovered == 0 else (
            f"; {uncovered} record(s) after it are not covered by a signature (the server is running, or stopped "
            "without its shutdown checkpoint)"
        )
        print(f"checkpoints: {len(signed)} signature(s) verified, the last at seq {signed[-1]}{note}")
    if against is None:
        return 0
    try:
        copy = read_copy(against)
    except OSError as exc:
        print(f"relay-shell audit verify: --against: cannot read {against}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_CONFIG
    if not copy.chains:
        shown = f": {copy.unreadable[0]}" if copy.unreadable else ""
        print(
            f"relay-shell audit verify: --against: {against} holds no audit record ({copy.lines} line(s){shown}); "
            "give the collector's file of this host's records",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    comparison = compare(local.chains, copy, against)
    stream = sys.stdout if comparison.exit_code == 0 else sys.stderr
    for line in comparison.lines:
        print(line, file=stream)
    return comparison.exit_code


def _configured_audit_path() -> Path:
    from relay_shell.config import ConfigError, load_settings

    try:
        return load_settings().audit_path
    except ConfigError as exc:
        print(f"relay-shell: configuration error: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_CONFIG) from None
