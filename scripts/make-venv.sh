#!/usr/bin/env bash
# Make (or keep) a virtual environment for one interpreter: scripts/make-venv.sh VENV PYTHON.
# A venv made over an existing one of another interpreter is silently broken (its `ssl` cannot import), which
# is what `python3 -m venv .venv` does after the Quickstart ran with another python3: recreate it instead.
set -euo pipefail
venv=$1
python=$2
identity='import sys, ssl; print(sys.base_prefix, sys.version)'
want=$("$python" -c "$identity")
have=$("$venv/bin/python" -c "$identity" 2>/dev/null || true)
if [ "$want" != "$have" ]; then
  [ -z "$have" ] || echo "make-venv: $venv was made by another interpreter (or is broken); recreating it for $python" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
fi
