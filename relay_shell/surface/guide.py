"""The server `instructions` (concise) and the `operating_guide` prompt (detailed), for the tools that exist.
Every later capability extends both."""

INSTRUCTIONS = """\
relay-shell runs real commands on this host. There is no sandbox: every call is classified by policy \
(tier 0 observe, 1 reversible, 2 stateful, 3 irreversible), bounded in time and output, and recorded \
in a hash-chained audit log (digests of outputs, never the outputs).
- One command: shell_exec (via /bin/sh -c; use_shell=false for an argv). Multi-line logic: shell_script \
(bash with `set -euo pipefail` by default, sh, or python) instead of long `&&` chains.
- Results start with one status line: [exit N], [signal NAME], [TIMEOUT after Ns] (partial output kept), \
[DENIED tier N (NAME): why] (nothing ran; do not retry a variant), [ERROR: Kind: message] (fix the argument \
named). Long output is cut to head + tail with a [TRUNCATED: …] line: narrow the command (grep, tail, head) \
rather than raising max_output.
- Commands get no terminal and stdin is empty unless you pass `stdin`; pagers are off. Set `timeout` for \
long jobs. server_info shows the policy mode and limits; audit_tail shows recent audited calls.
Read the operating_guide prompt for the full workflow."""

OPERATING_GUIDE = """\
# relay-shell operating guide

relay-shell gives you real command of this Linux host. Nothing is sandboxed. The safety net is that every \
call is classified, admitted by policy, bounded, and audited. Work like a careful operator on a production box.

## Choosing a tool

| You want to… | Use | Notes |
|---|---|---|
| run one command and read its output | `shell_exec` | `command` runs via `/bin/sh -c`; `use_shell=false` runs an argv (string split like a shell, or a list) |
| run several steps with logic, loops, heredocs | `shell_script` | `interpreter` bash (default), sh or python; `strict=true` adds `set -euo pipefail` for shells |
| feed data to a command | `shell_exec` with `stdin` | the command gets EOF after your data; without `stdin` it reads /dev/null |
| change environment for one call | `env` | `{"NAME": "value"}`; `{"NAME": null}` unsets; pagers and prompts are already off |
| check limits, policy mode, audit state | `server_info` | tier 0, always allowed |
| see what was run recently | `audit_tail` | filters `tool`, `tier`, `denied`, `lines` |

Prefer one precise command over exploratory dumps: `grep -n pattern file | head -50` beats `cat` of a large \
file. Output beyond `max_output` is cut to its head and tail; the audit log still records the digest of all of it.

## Reading results

The first line of every result says what happened:

- `[exit N]`: the command completed; non-zero exit is information, not a tool failure.
- `[signal NAME]`: the command was killed by a signal.
- `[TIMEOUT after Ns]`: the whole process group was stopped (SIGTERM, then SIGKILL); the output that arrived \
is kept below: read it before retrying with a larger `timeout` or a narrower command.
- `[DENIED tier N (NAME): reason]`: policy refused the call and nothing ran. Do not rephrase the command to get \
around it; tell the user what you wanted to do and why.
- `[ERROR: Kind: message]`: the call was invalid or failed; the message names the argument and what is allowed.
- `[NOTE: …]` lines follow the status when an argument was adjusted (for example a timeout clamped to the limit).
- `[TRUNCATED: N bytes produced, M shown — head H + tail T]` closes a cut body. Errors usually live in the tail.

`structuredContent` carries the same facts typed: `status`, `exit_code`, `signal`, `timed_out`, `truncated`, \
`output`, `output_bytes`, `output_sha256`, `duration_ms`, `notes`, `error`.

## Tiers and policy

Every call is classified from all the text that reaches the host (command, script, stdin, env):
0 observe (read-only), 1 reversible, 2 stateful (visible change, privilege escalation), 3 irreversible \
(destroys data, disks, boot). In `open` mode everything is admitted and audited; `guarded` refuses tier 2 and \
above unless the operator allowed it; `readonly` admits tier 0 only; operator deny rules apply in every mode. \
Classification is a speed bump, not a boundary: the audit log is what makes the work accountable.

## Worked loop

1. `server_info` once to learn the policy mode and limits.
2. Observe first (tier 0): `shell_exec` with `uname -a; df -h; systemctl --failed`.
3. Make one change at a time with a `timeout`, read the status line, verify with an observe command.
4. For multi-step changes write a `shell_script` with strict mode, so the first failure stops the script.
"""
