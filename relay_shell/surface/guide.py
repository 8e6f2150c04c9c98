"""The server `instructions` (concise) and the `operating_guide` prompt (detailed), for the tools that exist.
Every later capability extends both."""

INSTRUCTIONS = """\
relay-shell runs real commands on this host. There is no sandbox except in readonly mode, which the kernel \
enforces where it can (server_info's `enforcement`). Every call is classified by policy \
(tier 0 observe, 1 reversible, 2 stateful, 3 irreversible), bounded in time and output, and recorded \
in a hash-chained audit log (digests of outputs, never the outputs).
- One command: shell_exec (via /bin/sh -c; use_shell=false for an argv). Multi-line logic: shell_script \
(bash with `set -euo pipefail` by default, sh, or python) instead of long `&&` chains.
- Results start with one status line: [exit N], [signal NAME], [TIMEOUT after Ns] (partial output kept), \
[DENIED tier N (NAME): why] (nothing ran; do not retry a variant), [ERROR: Kind: message] (fix the argument \
named), [CONFIRM REQUIRED tier 3: why] (nothing ran: ask the human; only if they agree, \
operation_confirm(token) and repeat the identical call before it expires; if the client asks the human \
itself, a refusal comes back as [DENIED …]). Long output is cut to head + tail with a [TRUNCATED: …] line: narrow the command (grep, tail, head) \
rather than raising max_output.
- Commands get no terminal and stdin is empty unless you pass `stdin`; pagers are off. Set `timeout` for \
long jobs; one still running after `yield_after` seconds returns `[RUNNING: job ID …]`: wait with \
session_recv(session_id=ID, until=…, timeout=…). server_info shows the policy mode and limits; audit_tail shows recent audited calls.
- Anything that needs a terminal (REPL, password prompt, pager, TUI, installer questions): \
shell_spawn, then session_send(session_id, data, until=<regex of the next prompt>) returns the whole answer in \
one call; session_recv reads more (pass `since`=cursor to re-read), keys=["ctrl-c"] interrupts, \
secret_env types a password the operator provided, session_kill closes. Sessions are yours alone.
- Remote hosts: ssh_exec(host, command) is shell_exec over SSH (host = inventory alias, user@host:port; \
connections are pooled); ssh_spawn opens a remote terminal driven by the same session_* tools. Fleet work: \
ssh_hosts (inventory, @groups) → ssh_check (who is reachable) → ssh_exec on one canary → ssh_fanout(command, \
hosts) in batches; per-host status ok/failed/unreachable/timeout/denied/auth_failed/hostkey_rejected. Host keys: \
accept-new trusts a new host once and never a changed key; HostKeyMismatch means stop and ask the operator.
- Files: ssh_upload(host, local_path, remote_path) / ssh_download(host, remote_path, local_path) over SFTP \
(a large download: the remote `scp -f`); the destination path is the copy's own name (not a directory to put it in); recursive=true for a tree \
(symlinks stay symlinks); modes and mtimes kept; the result lists each file's SHA-256, and what did not arrive.
- Port forwards: ssh_forward(host, spec) with L:0:dhost:dport (reach a service only the SSH host reaches, through the local port the result names), R:0:dhost:dport (let the SSH host reach a service here) or D:0 (SOCKS proxy); listeners are loopback-only unless bind_address says otherwise (tier 2); every R forward is tier 2. ssh_forward_list shows bytes and connections; ssh_forward_close ends one; yours close when you disconnect or after an idle hour without connections.
Read the operating_guide prompt for the full workflow. Guided workflows (prompts with arguments): \
troubleshoot_host, run_interactive, fleet_change, review_audit; a policy mode that forbids their tools hides them."""

OPERATING_GUIDE = """\
# relay-shell operating guide

relay-shell gives you real command of this Linux host. Nothing is sandboxed except in `readonly` mode \
(below). The safety net is that every \
call is classified, admitted by policy, bounded, and audited. Work like a careful operator on a production box.

## Choosing a tool

| You want to… | Use | Notes |
|---|---|---|
| run one command and read its output | `shell_exec` | `command` runs via `/bin/sh -c`; `use_shell=false` runs an argv (string split like a shell, or a list) |
| run several steps with logic, loops, heredocs | `shell_script` | `interpreter` bash (default), sh or python; `strict=true` adds `set -euo pipefail` for shells |
| feed data to a command | `shell_exec` with `stdin` | the command gets EOF after your data; without `stdin` it reads /dev/null |
| change environment for one call | `env` | `{"NAME": "value"}`; `{"NAME": null}` unsets; pagers and prompts are already off |
| drive a REPL, password prompt, pager, TUI, installer | `shell_spawn` + `session_send(until=…)` | see "Sessions" below |
| a long build, upgrade or copy | `shell_exec` / `shell_script` / `ssh_exec` with `timeout` | still running after `yield_after` seconds it runs on as a job: see "Long-running commands" |
| run a command on one SSH host | `ssh_exec(host, command)` | same grammar as `shell_exec`; `stdin` gets EOF; connection errors by kind |
| a terminal on an SSH host | `ssh_spawn(host)` + `session_*` | exactly like a local session |
| see the fleet | `ssh_hosts`, resource `relay-shell://inventory` | aliases, addresses, groups (`@web`), jump hosts |
| who is reachable | `ssh_check(hosts)` | connect + `true` per host; empty `hosts` = every inventory host |
| one command on many hosts | `ssh_fanout(command, hosts)` | per-host status, exit code, bounded output |
| a host's key fingerprints | `ssh_keyscan(hosts)` | never writes known_hosts |
| copy a file or a directory tree to or from an SSH host | `ssh_upload`, `ssh_download` | SFTP (a large download: the remote `scp -f`); destination = the copy's own path; `recursive=true` for trees; SHA-256 per file |
| reach a port only an SSH host can reach, or let it reach one here | `ssh_forward(host, spec)` | `L:0:dhost:dport`, `R:0:dhost:dport`, `D:0` (SOCKS); `ssh_forward_list`, `ssh_forward_close` |
| check limits, policy mode, audit state | `server_info` | tier 0, always allowed |
| see what was run recently | `audit_tail` | filters `tool`, `tier`, `denied`, `lines` |
| know the team's rules for a task | `runbook_search(tags=[…])` | the operators' runbooks that match, best first, guardrails always; tier 0 |
| start a task (and open the briefing gate) | `begin_session(tags=[…])` | the same briefing for ~5 keywords of the task; opens the gate for this session |

Prefer one precise command over exploratory dumps: `grep -n pattern file | head -50` beats `cat` of a large \
file. Output beyond `max_output` is cut to its head and tail; the audit log still records the digest of all of it.

## Long-running commands

Give a long command a `timeout` for its whole life. If it still runs after `yield_after` seconds (server_info's `jobs`; \
`yield_after=0` waits for the end) the call returns `[RUNNING: job j-… after Ns | cursor C]` with the output so \
far; the command runs on as a job. Wait with `session_recv(session_id="j-…", until="done|error", timeout=30)`, \
repeated: it returns the new output, and once the job ended the first line and full result the call would have \
returned (`[exit N]`, `[signal …]`, `[TIMEOUT …]`). `session_kill(session_id="j-…")` ends it and what it started; \
`session_list` shows your jobs. A cut result (`[TRUNCATED: …]`) names an `output_id` (`o-…`): read every byte \
with `session_recv(session_id="o-…", since=0, max_bytes=65536)`, then `since=cursor` until `cursor` equals \
`total_bytes`.

## Sessions (terminals)

A session is a program in a pseudo-terminal that stays alive between calls: `shell_spawn` starts it (default \
`bash` without rc files; `command` may be `python3 -q`, `psql …`, `less file`, `top`, an installer) and \
returns its `session_id` with the first output. Then:

- `session_send(session_id, data, until=…)`: types `data` and presses Enter (`enter=false` to not), then waits \
until the regex `until` matches the new output and returns everything up to that moment. Use the program's \
prompt: `^>>> ` for Python, `[$#] $` for a shell, `Password: ` for a password prompt, `\\(END\\)|:$` for less. \
Matching ignores colour codes and skips the echo of what you typed. A list of regexes matches whichever comes \
first; `match_index` says which.
- The first line of a session result says how the wait ended: `[match N 'text' | cursor C]`, \
`[output quiet | cursor C]` (no `until`: output stopped for a moment), `[TIMEOUT after Ns: no match for until \
| cursor C]` (the output so far is below; read it before retrying), `[eof: exit N | cursor C]` (the program \
ended).
- `keys=[…]` presses named keys after `data`: `ctrl-c` (interrupt the foreground job), `ctrl-d` (end of input), \
`enter`, `tab`, `esc`, `up`/`down`/`left`/`right`, `pageup`/`pagedown`, `home`/`end`, `backspace`, `f1`…`f12`, \
`ctrl-a`…`ctrl-z`. With only `keys`, no Enter is added.
- Passwords: never put one in `data` if you can avoid it. The operator can allow variables for \
`secret_env="NAME"` (RELAY_SHELL_SECRET_ENV_ALLOW): wait \
for the prompt, then `session_send(session_id, secret_env="NAME", until=…)`; the value is typed, never shown \
or logged. Input typed at a no-echo prompt is withheld from the audit log, but only while the program \
reading it takes the whole line; otherwise nothing is typed (`PromptGone`).
- A program that reads only part of a line (`head -c`, `dd bs=1`, `read -n1`, a pager's one-key commands) \
leaves the rest to whatever reads next, usually the shell: that rest is classified as a command too. If the \
program reading changes between the check and the typing, nothing is typed (`ReaderChanged`): look at the \
session and send again. What reads a remote terminal (`ssh_spawn`) cannot be seen, so every line typed there is \
read this way: run one-shot commands with `ssh_exec`, which is classified as the whole command it is.
- `session_recv(session_id, until=…, timeout=…)` waits for more output without typing (a log \
line); without `until` it returns unread output at once. Every result has `cursor`; if a result is lost, \
`session_recv(since=<old cursor>)` reads it again. `dropped` > 0 means output was overwritten before anyone \
read it (the buffer is bounded): read more often or narrow the output.
- `session_resize(cols, rows)` for curses programs; `session_list` shows your sessions (state, cursor, \
unread, exit status); `session_kill(session_id)` ends the program and everything it started \
(`close=false` with `signal="INT"` only signals the foreground job).
- Each line you type is checked by policy like a command (and for Python that changes files or runs \
commands). Text typed without Enter counts with the next line; a line edited with control keys before Enter \
(Ctrl-U, arrows, Tab) counts as stateful, because the server cannot tell what it became: type whole lines. \
Idle sessions are closed after a while, and all of yours when you disconnect.

Worked loop (Python REPL):

1. `shell_spawn(command="python3 -q", until="^>>> ")` → `[spawned s-1a2b… | match 0 '>>> ' | cursor 4]`
2. `session_send(session_id="s-1a2b…", data="import json, sys; sys.version", until="^>>> ")` → the answer \
and the next prompt, in one result.
3. Multi-line blocks: send the lines, then an empty line: `data="for i in range(3):\\n    print(i)\\n"`, \
`until="^>>> "`.
4. A stuck step: `session_send(session_id, keys=["ctrl-c"], until="^>>> ")`.
5. Done: `session_send(session_id, data="exit()")` → `[eof: exit 0 …]`, or `session_kill(session_id)`.

## Remote hosts and fleets (SSH)

`host` is an inventory alias (from `~/.ssh/config` or the operator's inventory file, Ansible inventories \
included), `host`, `user@host` or `user@host:port`. Connection arguments (`user`, `port`, `key_path`, \
`known_hosts`, `jump`) are optional: the inventory and ssh_config fill them in as `ssh` would. Connections are \
pooled per identity, so repeated calls are cheap.

- `ssh_exec`: one command, the remote user's login shell runs it. `[exit N]`, `[TIMEOUT after Ns]` (the \
remote command and what it started are killed; partial output kept), or `[ERROR: Kind: …]` where Kind says \
what failed: `ConnectionRefused`, `Unreachable`, `UnknownHost`, `ConnectTimeout`, `AuthFailed`, \
`HostKeyMismatch`, `HostKeyUnknown`.
- `ssh_spawn`: a remote terminal; then `session_send(until=…)`, `session_recv`, `session_resize`, \
`session_kill` exactly as for a local session. A password typed at a prompt the output shows (`Password:`, \
`passphrase`) is withheld from the audit log; prefer `secret_env`.
- Host-key trust: `accept-new` (default) trusts a host seen for the first time and records its key; a *changed* \
key is always refused (`HostKeyMismatch`: possible man-in-the-middle; stop and tell the user, do not retry with \
`ignore`). `strict` connects only to hosts already in known_hosts (`HostKeyUnknown` otherwise: `ssh_keyscan` \
shows the fingerprint to verify). `known_hosts="ignore"` disables the check; it is tier 2 and audited.

Fleet workflow:

1. `ssh_hosts` (or resource `relay-shell://inventory`): the hosts and groups. Target a group with `"@web"`.
2. `ssh_check(hosts="@web")`: who is reachable; fix or exclude `unreachable`, `auth_failed`, \
`hostkey_rejected` hosts before changing anything.
3. Canary: `ssh_exec(host="web01", command=…)` on one host; verify the result with an observe command.
4. `ssh_fanout(command=…, hosts="@web", concurrency=8)`: the first line counts hosts by status \
(`ok`, `failed` = non-zero exit, `unreachable`, `timeout`, `denied` = refused by policy for that host, \
`auth_failed`, `hostkey_rejected`); then one `=== host: status exit N Tms` block per host. Go in batches \
and stop at the first unexpected failure; summarize per host for the user.

Policy sees the target too: a host the operator denied is refused under every spelling (alias, address, \
decimal or hex IP, IPv4-mapped IPv6).

File transfers (`ssh_upload`, `ssh_download`, SFTP on the pooled connection — a large named file is \
downloaded over the remote `scp -f` there —, tier 2):

- The destination path names the copy itself: `ssh_upload(host, local_path="/tmp/app.tar", \
remote_path="/srv/app.tar")`. A directory already there is refused (`IsADirectory`), not written into; a \
missing parent directory is `NotFound` (create it with `ssh_exec mkdir -p` first). `~/x` and relative remote \
paths start in the remote user's home.
- `recursive=true` copies a directory tree and merges it into an existing directory (files there are \
replaced). Symlinks inside the tree are copied as symlinks and never followed; devices, sockets and FIFOs are \
skipped and listed. Mode bits and modification times travel (whole seconds); ownership does not.
- A file never appears half-written: it lands under a temporary name and is renamed when complete. On \
`[TIMEOUT …]`, `[ERROR: PartialTransfer …]` or a size-limit error, `files` lists what arrived (path, bytes, \
sha256) and `failed` what did not and why; rerun only what is missing, with a larger `timeout` if needed.
- Verify with the digests: `ssh_exec(host, "sha256sum /srv/app.tar")` must equal the result's sha256. Calls \
over `RELAY_SHELL_MAX_TRANSFER_BYTES` (server_info) are refused before anything is copied.

Port forwards (`ssh_forward`) stay open until `ssh_forward_close`, until you disconnect, until they carry no \
connection for the idle timeout (an hour by default), or until the SSH connection is lost:

- `L:lport:dhost:dport`: a listener on this machine; each connection to it is carried over SSH and opened to \
dhost:dport *from the SSH host* (`L:0:127.0.0.1:5432` reaches a database on its loopback). Then use the port \
the result names: `shell_exec("psql -h 127.0.0.1 -p PORT …")`.
- `R:rport:dhost:dport`: a listener on the SSH host; its connections come back and are opened to dhost:dport \
*from this machine*. Always tier 2: whoever reaches that port on the SSH host reaches this machine.
- `D:lport`: a SOCKS 4/5 proxy on this machine (`curl --socks5-hostname 127.0.0.1:PORT http://internal/`); each \
destination a client names is checked against the operator's deny rules then.
- Port 0 picks a free port; the result's first line and `listen_port` say which. IPv6 destinations in brackets: \
`L:0:[::1]:80`. Listeners bind loopback; `bind_address="0.0.0.0"` exposes one to other hosts and is tier 2.
- `ssh_forward_list`: your forwards with bytes each way and connections (open, failed = destination unreachable, \
refused = by policy or over the limit of connections); `ssh_forward_close(forward_id)` ends one and reports \
what it carried. Close what you no longer need: the number of forwards is limited (one client may hold half).

## Reading results

The first line of every result says what happened:

- `[exit N]`: the command completed; non-zero exit is information, not a tool failure.
- `[signal NAME]`: the command was killed by a signal.
- `[TIMEOUT after Ns]`: the whole process group was stopped (SIGTERM, then SIGKILL); the output that arrived \
is kept below: read it before retrying with a larger `timeout` or a narrower command.
- `[DENIED tier N (NAME): reason]`: policy refused the call and nothing ran. Do not rephrase the command to get \
around it; tell the user what you wanted to do and why.
- `[ERROR: Kind: message]`: the call was invalid or failed; the message names the argument and what is allowed.
- `[GATED: why]`: the briefing gate held the call back and nothing ran; the runbooks that apply follow (see \
"Team runbooks").
- `[NOTE: …]` lines follow the status when an argument was adjusted (for example a timeout clamped to the limit).
- `[TRUNCATED: N bytes produced, M shown — head H + tail T]` closes a cut body. Errors usually live in the tail.

`structuredContent` carries the same facts typed: `status`, `exit_code`, `signal`, `timed_out`, `truncated`, \
`output`, `output_bytes`, `output_sha256`, `duration_ms`, `notes`, `error`.

## Tiers and policy

Every call is classified from all the text that reaches the host (command, script, stdin, env):
0 observe (read-only), 1 reversible, 2 stateful (visible change, privilege escalation), 3 irreversible \
(destroys data, disks, boot). In `open` mode everything is admitted and audited; `guarded` refuses tier 2 and \
above unless the operator allowed it; `readonly` admits tier 0 only; operator deny rules apply in every mode. \
What guarded mode admits: reading, listing, help and dry runs, creating files, builds, commits, one `mv` \
rename, and programs the classifier does not know. It refuses deleting files, `sudo`, services, packages, users, \
firewall and network changes, in-place edits, container, cluster and cloud changes, and everything tier 3: \
`rm -r`, deleting every file of a tree (`find -delete`, loops, `xargs rm`), disks, reboot, force pushes, SQL \
DROP, cloud and VM deletion, also inside loops, `bash -c`, `xargs`, `ssh HOST CMD`, stdin to a shell or a \
database client, and the env overlay. Measured on 2,056 real commands: 93% get the exact tier, 0.8% of \
stateful ones are rated admissible (none irreversible); on commands not seen while tuning 15% of stateful ones \
are, mostly of programs it has no rule for. Classification is a speed bump, not a boundary: the audit log is \
what makes the work accountable. Writing, moving, linking or deleting this server's own files (its audit log \
and rotations, signing key, token file, OAuth state) is tier 3 in every mode; reading and copying them \
elsewhere is not.

`readonly` is also enforced by the kernel where the host allows it (`server_info` → `enforcement.readonly`: \
`landlock ABI N`, or `classifier-only` and why). Then every process a call or session starts is confined: \
creating, writing, truncating, renaming or removing files, changing modes or owners, `sudo` and other \
set-user-ID programs, signals to processes outside the call, listening on TCP ports all fail with \
`Permission denied` or `Operation not permitted`. That is readonly working, not a fault to work around: report \
what you wanted to do. Programs that need a scratch file (a large `sort`, a here-document bigger than a pipe) \
fail the same way; use a pipe or ask for another mode. What the kernel cannot stop is asking another program to \
write for you (a daemon over a socket: Docker, systemd, a database): the classifier refuses those.

Tier-3 confirmation (when the operator turns it on, `server_info` shows `confirm_tier3`): an irreversible \
call does not run at once.
- `token`: the result is `[CONFIRM REQUIRED tier 3: why]`, what the call would do and where, and a token. Tell \
the human exactly that and ask. Only if they agree: `operation_confirm(token=…)`, then repeat the identical call \
(same tool, arguments, `cwd`, host) within the time stated; it runs once. A changed argument, directory, host or \
another client gets a new `[CONFIRM REQUIRED …]`; a used or expired token gets `[ERROR: UnknownToken …]` or \
`TokenExpired`: repeat the call for a new one. Never call `operation_confirm` without the human's yes.
- `elicit`: your client shows the human the tool, command, target and tier and asks; on yes the call runs and \
returns its normal result, on no or dismiss it returns `[DENIED tier 3 …]`: do not retry, ask the human what \
they want. A client that cannot ask gets tokens as above.
- The human is shown everything the call sends (command, stdin, env, target). A call too long to read gets \
`[ERROR: ConfirmTooLong …]` and is never offered: split it, or write a script file the human reviews first. In \
a terminal session a confirmation holds only while nothing else is typed into or printed by the session.

## Worked loop

1. `server_info` once to learn the policy mode and limits.
2. Observe first (tier 0): `shell_exec` with `uname -a; df -h; systemctl --failed`.
3. Make one change at a time with a `timeout`, read the status line, verify with an observe command.
4. For multi-step changes write a `shell_script` with strict mode, so the first failure stops the script.

## Team runbooks

The operators can give relay-shell their own runbooks (RELAY_SHELL_RUNBOOK_DIR): rules and procedures such as \
"never restart the primary database during business hours" or "how we rotate certificates on the edge fleet". \
When they exist, the server instructions end with an index (guardrails first, then by priority; name and \
summary), and the rules may apply to what you are asked to do: look before acting, and follow what applies.

- `runbook_search(tags=["postgres", "failover", "db1"])` (or `query="fail over the orders database"`): each \
keyword is matched against runbook names, titles, summaries, tags and chapter headings (a keyword matches where \
words start: `cert` finds "certificates"), and against the hosts or `@groups` a runbook is about. \
score = matches × priority; priority-10 runbooks are guardrails and always come first. The answer fills \
`max_bytes` [8192]: the full text of the best matches, then name + summary, then names; ask again with other \
keywords whenever the task moves to another system, service or step, or a step fails.
- Each runbook is also a prompt (its arguments go into a quoted user-data section, never into its text) and the \
resource `relay-shell://runbooks/NAME` (the Markdown as written); `relay-shell://runbooks` is the index, with \
the files that failed to load and why. The lists follow the directory as the operators edit it (the server \
sends `list_changed` notifications).
- The briefing gate (RELAY_SHELL_GATE=briefing; `server_info` shows `gate`): until this session is briefed, a call \
that would run anything (tier 1 and above) does not run. It answers `[GATED: …]` with the runbooks its own words \
select (the tool, the command, the host) and every guardrail; read them, then repeat the identical call and it \
runs. Better: start the task with `begin_session(tags=[about 5 keywords of the task])`, which returns the \
briefing for the whole task and opens the gate for the rest of the session. Observing (tier 0) is never held. \
Another client, or a new connection, has its own gate.

## Workflow prompts

Step-by-step workflows the user can start with arguments (their values arrive as quoted user data, never as \
instructions): `troubleshoot_host` (host, symptom: read-only investigation, evidence vs interpretation), \
`run_interactive` (program, goal: drive a REPL or TUI in a session), `fleet_change` (goal, hosts, command: \
check, canary, batches), `review_audit` (question, since: answer from the audit log). A policy mode that \
forbids the tools a workflow needs hides it (`readonly` offers troubleshoot_host and review_audit).
"""
