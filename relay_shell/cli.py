"""Command line: serve (default; the steps are in serve.py), --check-config, --config, config show, audit verify,
audit tail, audit report, audit keygen, token."""

from __future__ import annotations

import gc
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from relay_shell import __version__
from relay_shell.settings.file import CONFIG_VARIABLE

if TYPE_CHECKING:
    import argparse

EXIT_CONFIG = 2
EXIT_NOT_SIGNED = 4  # audit verify --public-key: an intact chain with no checkpoint in it yet


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        # How an MCP client starts the server: nothing to parse, so argparse (~0.4 MiB and ~1 ms) stays unloaded.
        return serve_command(check_only=False)
    if args[:1] == ["audit"]:
        return audit_command(args[1:])
    if args[:1] == ["token"]:
        return token_command(args[1:])
    if args[:1] == ["config"]:
        return config_command(args[1:])
    import argparse

    parser = argparse.ArgumentParser(
        prog="relay-shell",
        description="Audited MCP server for shell commands. Configure with RELAY_SHELL_* environment variables, or "
        "a TOML config file (--config) they override.",
        epilog="Audit tools: relay-shell audit verify [PATH ...] [--public-key K] [--against COPY] | relay-shell audit "
        "tail [-n N] [--follow] ... | relay-shell audit report LOG ... -o report.html | relay-shell audit keygen "
        "PATH | HTTP tokens: relay-shell token NAME | The effective settings: relay-shell config show [--config FILE]",
        parents=[config_option()],
    )
    parser.add_argument("--version", action="version", version=f"relay-shell {__version__}")
    parser.add_argument("--check-config", action="store_true", help="validate the configuration and exit")
    parser.add_argument("--transport", choices=["stdio", "http"], help="override RELAY_SHELL_TRANSPORT")
    options = parser.parse_args(args)
    use_config_file(options.config)
    if options.transport:
        os.environ["RELAY_SHELL_TRANSPORT"] = options.transport
    return serve_command(check_only=options.check_config)


def serve_command(check_only: bool) -> int:
    # A start makes ~140,000 objects that live as long as the server (modules, the SDK's and our models): the
    # cyclic garbage collector would walk them again and again while they are made (a quarter of the bare SDK's
    # own import time). serve.py freezes them once the server is assembled and turns the collector back on.
    gc.disable()
    from relay_shell.errors import ConfigError
    from relay_shell.serve import serve

    try:
        return serve(check_only=check_only)
    except ConfigError as exc:
        return configuration_error(exc)
    finally:
        gc.enable()


def configuration_error(exc: Exception) -> int:
    print(f"relay-shell: configuration error: {exc}", file=sys.stderr)
    return EXIT_CONFIG


def config_option() -> argparse.ArgumentParser:
    """--config FILE, for every command that reads the settings."""
    import argparse

    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--config",
        metavar="FILE",
        help="a TOML file of settings grouped by area (e.g. [sessions] max_sessions = 16); RELAY_SHELL_* variables "
        "override it; default: $RELAY_SHELL_CONFIG",
    )
    return parent


def use_config_file(path: str | None) -> None:
    # Through the environment, as --transport: the settings read it there, and so does every later load.
    if path is not None:
        os.environ[CONFIG_VARIABLE] = path


def config_command(args: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="relay-shell config", description="Show the effective configuration.")
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser(
        "show",
        parents=[config_option()],
        help="print the effective settings as TOML, each with where it came from (environment, file, default); "
        "secrets masked",
    )
    options = parser.parse_args(args)
    use_config_file(options.config)
    from relay_shell.config_show import show_settings
    from relay_shell.errors import ConfigError

    try:
        return show_settings()
    except ConfigError as exc:
        return configuration_error(exc)


def token_command(args: list[str]) -> int:
    """A new random bearer token for the HTTP transport: the token goes to the client, the line to TOKEN_FILE."""
    import argparse
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


def audit_parser() -> argparse.ArgumentParser:
    import argparse

    parser = argparse.ArgumentParser(prog="relay-shell audit", description="Inspect the audit log.")
    sub = parser.add_subparsers(dest="action", required=True)
    verify = sub.add_parser(
        "verify", parents=[config_option()], help="verify the hash chain (exit 0 only for a complete valid chain)"
    )
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
    tail = sub.add_parser("tail", parents=[config_option()], help="print recent records as JSON lines")
    tail.add_argument("-n", "--lines", type=int, default=20, help="number of records (default 20)")
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new records")
    tail.add_argument("--tool", help="only this tool")
    tail.add_argument("--tier", type=int, choices=[0, 1, 2, 3], help="only this tier")
    tail.add_argument("--denied", action="store_true", help="only denied calls")
    tail.add_argument("--call-id", help="only the records of this call (its start and end)")
    tail.add_argument(
        "--job",
        metavar="JOB_ID",
        help="only a job's records (j-…): the start, job note and end of the call that ran on as it, and the "
        "reads, sends and kill of the job",
    )
    tail.add_argument("--path", type=Path, help="log file; default: the configured log")
    tail.add_argument(
        "--execs", action="store_true", help="only records with an exec trace, printed as their exec lists"
    )
    from relay_shell.report import command as report

    report.add_parser(sub)
    return parser


def audit_command(args: list[str]) -> int:
    parser = audit_parser()
    options = parser.parse_args(args)
    use_config_file(getattr(options, "config", None))

    if options.action == "report":
        from relay_shell.report import command as report

        return report.run(options)
    if options.action == "verify":
        return verify_command(options.paths or [_configured_audit_path()], options.public_key, options.against)
    if options.action == "keygen":
        from relay_shell.offhost.signing_keys import KeyFileError, generate_keypair

        try:
            public = generate_keypair(options.path)
        except (KeyFileError, OSError) as exc:
            print(f"relay-shell audit keygen: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        print(f"private key: {options.path} (0600; RELAY_SHELL_AUDIT_SIGNING_KEY={options.path})")
        print(f"public key:  {public} (for relay-shell audit verify --public-key; keep a copy off this host)")
        return 0

    from relay_shell.audit.tail import TailFilter, exec_lines, follow_records, recent_records, shown

    if options.lines < 1:
        parser.error("-n must be at least 1")
    path = options.path or _configured_audit_path()
    if options.job is not None and re.fullmatch(r"j-[0-9a-f]{12}", options.job) is None:
        parser.error(f"--job: {options.job!r} is not a job id; allowed: j- and 12 hex digits, as a result names it")
    record_filter = TailFilter(
        tool=options.tool,
        tier=options.tier,
        denied=True if options.denied else None,
        call_id=options.call_id,
        job_id=options.job,
    )
    if not path.exists():
        print(f"relay-shell: audit log {path} does not exist", file=sys.stderr)
        return 1
    record_filter = replace(record_filter, execs=True) if options.execs else record_filter

    def show(record: dict[str, Any]) -> str:
        text = "\n".join(exec_lines(record)) if options.execs else orjson.dumps(record).decode()
        return shown(text) + "\n"

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
    from relay_shell.audit.verify import verify_files
    from relay_shell.offhost.checkpoints import CHECKPOINT_TOOL, check_checkpoint
    from relay_shell.offhost.copy_verifier import LocalChains, compare, read_copy
    from relay_shell.offhost.signing_keys import KeyFileError, key_id, load_public_key

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
        note = (
            ""
            if uncovered == 0
            else (
                f"; {uncovered} record(s) after it are not covered by a signature (the server is running, or stopped "
                "without its shutdown checkpoint)"
            )
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
    from relay_shell.errors import ConfigError
    from relay_shell.settings.load import load_settings

    try:
        return load_settings().audit.audit_path
    except ConfigError as exc:
        raise SystemExit(configuration_error(exc)) from None
