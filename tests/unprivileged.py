"""Python for the processes the tests run as an unprivileged user (`nobody`): the server of
tests/e2e/trace/test_trace_unprivileged.py and the child of tests/e2e/containment/test_hard_escapes.py that
switches to nobody.

Such a process needs the interpreter, its standard library, the test environment's packages and this checkout's
`relay_shell`, all where nobody can read them. Where it can already (Debian's /usr/bin/python3, a checkout under
/work), they are used as they are. Where it cannot — pyenv's interpreters live under /root/.pyenv and a clone may
live under /root, both behind /root's mode 0700 — `unprivileged_python` mirrors the interpreter's installation
and the venv's packages under /var/tmp/relay-shell-nobody (hard links where the file system allows, copies
otherwise; kept for later runs, rebuilt when the interpreter or the packages change) and, when the checkout is
not readable either, copies `relay_shell` there for the run. The mirror is the same interpreter build, so a test
on pyenv's 3.13 still runs on 3.13. Nothing is skipped: when no such interpreter can be made, the test fails
saying why.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534  # uid of `nobody` and gid of `nogroup` on Debian
MIRROR_ROOT = Path("/var/tmp/relay-shell-nobody")
STALE_SECONDS = 14 * 24 * 3600  # mirrors not used for this long are removed when another is built
CHECKOUT = Path(__file__).resolve().parent.parent
# Never needed to run relay-shell: the interpreter's own test suite (~120 MB), its IDE and demos, and what
# builds extensions; its own site-packages is replaced by the venv's.
SKIPPED = {"test", "idlelib", "turtledemo", "ensurepip", "site-packages"}
# What nobody must be able to run: this very interpreter build (an executable whose own libpython cannot be read
# falls back to the system's, another version: pyenv's 3.11.7 ran as Debian's 3.11.2 that way), the server's entry
# point and what it loads first, the SDK, asyncssh.
IMPORT_CHECK = (
    f"import sys; assert sys.version == {sys.version!r}, 'Python ' + sys.version; "
    "import ctypes, relay_shell.cli, relay_shell.server, mcp.server.mcpserver, asyncssh"
)


@dataclass(frozen=True)
class UnprivilegedPython:
    executable: str
    env: dict[str, str]  # PYTHONPATH (relay_shell where nobody reads it); LD_LIBRARY_PATH for a mirror's libpython


def as_nobody(command: list[str]) -> list[str]:
    """`command` run as nobody:nogroup with no supplementary groups (util-linux's setpriv)."""
    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to run a process as nobody"
    return [setpriv, "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]


@functools.cache
def unprivileged_python() -> UnprivilegedPython:
    """This test run's interpreter, as nobody can run it with relay-shell and its packages importable."""
    assert os.geteuid() == 0, "running a process as nobody needs root"
    direct = UnprivilegedPython(sys.executable, {"PYTHONPATH": str(CHECKOUT)})
    if _import_problem(direct) is None:
        return direct
    source = CHECKOUT if _readable_by_others(CHECKOUT / "relay_shell" / "__init__.py") else _copy_of_the_source()
    mirrored = _mirror()
    candidate = UnprivilegedPython(
        str(mirrored / "bin" / Path(sys.executable).name),
        {"PYTHONPATH": str(source), "LD_LIBRARY_PATH": str(mirrored / "lib")},
    )
    problem = _import_problem(candidate)
    assert problem is None, f"nobody cannot run {candidate.executable} with relay-shell importable: {problem}"
    return candidate


def _import_problem(python: UnprivilegedPython) -> str | None:
    env = {"PATH": "/usr/bin:/bin", "HOME": "/", **python.env}
    try:
        done = subprocess.run(
            [python.executable, "-c", IMPORT_CHECK],
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            env=env,
            cwd="/",
            capture_output=True,
            text=True,
            timeout=120,
        )
    except OSError as exc:  # the interpreter itself cannot be executed
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["exit status"])[-1]


def _readable_by_others(path: Path) -> bool:
    """Whether a user who is neither owner nor in the group reads `path`: every directory above it searchable."""
    if not os.stat(path).st_mode & stat.S_IROTH:
        return False
    return all(os.stat(directory).st_mode & stat.S_IXOTH for directory in path.parents)


def _private_root() -> Path:
    """MIRROR_ROOT, made by us (root) and writable by no one else: what runs as nobody is read from it."""
    MIRROR_ROOT.mkdir(mode=0o755, exist_ok=True)
    status = os.lstat(MIRROR_ROOT)
    assert stat.S_ISDIR(status.st_mode) and status.st_uid == os.geteuid() and not status.st_mode & 0o022, (
        f"{MIRROR_ROOT} must be a directory owned by root that no one else can write; remove it and run again"
    )
    os.chmod(MIRROR_ROOT, 0o755)
    return MIRROR_ROOT


def _copy_of_the_source() -> Path:
    """This checkout's relay_shell, copied where nobody reads it, for this process's run."""
    directory = Path(tempfile.mkdtemp(prefix="source-", dir=_private_root()))
    os.chmod(directory, 0o755)
    shutil.copytree(CHECKOUT / "relay_shell", directory / "relay_shell", copy_function=shutil.copy2)
    atexit.register(shutil.rmtree, directory, True)
    return directory


def _mirror() -> Path:
    """The interpreter's installation with the venv's packages as its site-packages, under MIRROR_ROOT: built once
    per interpreter and set of packages (test workers wait for each other on a lock)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    packages = sorted({Path(sysconfig.get_paths()[name]) for name in ("purelib", "platlib")})
    installed = sorted(entry.name for directory in packages for entry in directory.glob("*.dist-info"))
    identity = "\n".join([sys.base_prefix, sys.version, *map(str, packages), *installed])
    root = _private_root()
    mirror = root / f"python-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = mirror / "ready"
        if ready.exists():
            os.utime(ready)
            return mirror
        _remove_stale(root)
        building = Path(tempfile.mkdtemp(prefix=mirror.name + ".building-", dir=root))
        os.chmod(building, 0o755)
        base = Path(sys.base_prefix)
        _mirror_file(Path(os.path.realpath(base / "bin" / version)), building / "bin" / Path(sys.executable).name)
        for library in (base / "lib").glob("libpython*.so*"):
            _mirror_file(Path(os.path.realpath(library)), building / "lib" / library.name)
        _mirror_tree(base / "lib" / version, building / "lib" / version)
        for directory in packages:
            _mirror_tree(directory, building / "lib" / version / "site-packages")
        shutil.rmtree(mirror, ignore_errors=True)
        building.rename(mirror)
        ready.touch()
    return mirror


def _mirror_tree(source: Path, target: Path) -> None:
    for directory, subdirectories, files in os.walk(source):
        relative = Path(directory).relative_to(source)
        subdirectories[:] = [
            name
            for name in subdirectories
            if not (relative == Path(".") and (name in SKIPPED or name.startswith("config-")))
            and not name.startswith("__editable__")
        ]
        for name in files:
            if name.startswith("__editable__"):  # the venv's pointer to the checkout: PYTHONPATH says where it is
                continue
            path = Path(directory) / name
            if path.is_file():  # a symlink to a file is mirrored as the file (its target may be under /root)
                _mirror_file(Path(os.path.realpath(path)), target / relative / name)


def _mirror_file(source: Path, target: Path) -> None:
    if not target.parent.exists():
        target.parent.mkdir(parents=True)
        for directory in (target.parent, *target.parent.parents):
            if directory == MIRROR_ROOT:
                break
            os.chmod(directory, 0o755)
    try:
        os.link(source, target)
    except OSError:  # another file system, or hard links refused: a copy
        shutil.copy2(source, target)


def _remove_stale(root: Path) -> None:
    """Mirrors not used for STALE_SECONDS, half-built ones, and source copies left by a run that was killed."""
    now = time.time()
    for entry in root.iterdir():
        ready = entry / "ready"
        stale_mirror = entry.name.startswith("python-") and (
            ".building-" in entry.name or not ready.exists() or now - ready.stat().st_mtime > STALE_SECONDS
        )
        stale_source = entry.name.startswith("source-") and now - entry.stat().st_mtime > 24 * 3600
        if stale_mirror or stale_source:
            with contextlib.suppress(OSError):
                shutil.rmtree(entry)
