"""Network clients read as they read their command lines: curl, wget, ssh (and scp, sftp, rsync's remote shell).
Beyond what they send (a request that changes a remote resource is 2) they write the files their options name
(curl's `-o`, `-O`, `--output-dir`, `-D`, `-c`, `--trace`, `--stderr`, `--libcurl`, `--hsts`, `-w '%output{F}'`;
wget's `-O`, `-o`, `--save-cookies`, `--warc-file`), read configuration that can do all of that (`curl -K FILE`,
`wget --config`/`-e`; curl's config read from stdin is classified as options, stdin.py), load code (curl
`--engine`, ssh `-I`, `PKCS11Provider`) and run commands (ssh's `ProxyCommand`, `LocalCommand`,
`KnownHostsCommand`, scp/sftp `-S`, rsync `-e`, wget `--use-askpass`). URLs that send raw bytes to a service
(`gopher://`, `dict://`, `telnet://`) or write local files (`file://` with an upload) are 2.
"""

from __future__ import annotations

import re

from relay_shell.policy.calls import Call, Option, Verdict, read_options, verdict
from relay_shell.policy.files import writes_onto
from relay_shell.policy.vocabulary import words

_HTTP_WRITES = {"POST", "PUT", "DELETE", "PATCH"}
_CURL_VALUES = words(
    "-o --output -D --dump-header -c --cookie-jar -K --config -X --request -H --header -d --data --data-raw"
    " --data-binary --data-urlencode --data-ascii --json -F --form --form-string -T --upload-file -u --user -A"
    " --user-agent -e --referer -b --cookie -x --proxy -U --proxy-user -w --write-out -m --max-time"
    " --connect-timeout -r --range -E --cert --key --cacert --capath --output-dir --trace --trace-ascii --stderr"
    " --libcurl --hsts --alt-svc --etag-save --etag-compare --engine --url -Q --quote --mail-from --mail-rcpt"
    " --unix-socket --abstract-unix-socket --resolve --connect-to --interface --local-port --retry --retry-delay"
    " -C --continue-at -z --time-cond --limit-rate -Y --speed-limit -y --speed-time --max-filesize --proto"
    " --proto-redir --variable --expand-url --expand-data --oauth2-bearer --aws-sigv4 --ciphers -P --ftp-port"
    " --netrc-file --dns-servers --doh-url --happy-eyeballs-timeout-ms --max-redirs -t --telnet-option"
)
_CURL_WRITES = words(
    "-o --output -D --dump-header -c --cookie-jar --trace --trace-ascii --stderr --libcurl --hsts --alt-svc --etag-save"
)
_CURL_SENDS = words("-d -F -T --form --form-string --upload-file --json --mail-rcpt -Q --quote")
_RAW_SCHEMES = ("gopher://", "gophers://", "dict://", "telnet://", "smtp://", "smtps://", "tftp://", "mqtt://")
_CONFIG_LINE = re.compile(r"\s*-{0,2}([A-Za-z0-9][\w-]*)(?:\s*[=:]\s*|\s+|$)(.*)")
_WRITE_OUT_FILE = re.compile(r"%output\{>{0,2}([^}]{1,4096})\}")


def curl_verdict(call: Call) -> Verdict:
    options, urls = read_options(call.words, _CURL_VALUES)
    found = [verdict(0, "HTTP GET to stdout")]
    written: list[str] = []
    method = next((value or "" for name, value in options if name in ("-X", "--request")), "").upper()
    if method in _HTTP_WRITES or any(name in _CURL_SENDS or name.startswith("--data") for name, _v in options):
        found.append(verdict(2, "HTTP request that changes a remote resource"))
    urls += [value or "" for name, value in options if name == "--url"]
    for url in urls:
        if url.lower().startswith(_RAW_SCHEMES):
            found.append(verdict(2, f"curl sends a raw request to a service ({url.split(':', 1)[0]}://)"))
        elif url.lower().startswith("file://") and _has(options, "-T", "--upload-file"):
            written.append(url[7:])
    remote_name = any(name in ("-O", "--remote-name", "--remote-name-all", "-J") for name, _v in options)
    directory = next((value for name, value in options if name == "--output-dir" and value), None)
    if remote_name:
        found.append(writes_onto((directory or ".") + "/", "curl") or verdict(1, "downloads to a file"))
    for name, value in options:
        if name in _CURL_WRITES and value and value != "-":
            written.append(value if directory is None or name not in ("-o", "--output") else f"{directory}/{value}")
        elif name in ("-w", "--write-out") and value:
            written += _WRITE_OUT_FILE.findall(value)
        elif name in ("-K", "--config") and value not in ("-", "/dev/stdin"):
            found.append(verdict(1, f"curl reads options from {value}, which are not seen"))
        elif name == "--engine" and value != "list":
            found.append(verdict(2, "curl --engine loads a crypto engine: code that cannot be seen"))
    for path in written:
        found.append(writes_onto(path, "curl") or verdict(1, f"curl writes {path}"))
    return max(found, key=lambda item: item.tier)


def _has(options: list[Option], *names: str) -> bool:
    return any(name in names for name, _value in options)


def curl_config_words(text: str) -> list[str]:
    """A curl config file (`-K`) as the options it stands for: `name = value`, `name value`, `--name value`."""
    found: list[str] = []
    for line in text.splitlines():
        match = _CONFIG_LINE.match(line)
        if match is None:
            continue
        name = match.group(1)
        found.append(("-" if len(name) == 1 else "--") + name)
        if match.group(2):
            found.append(match.group(2).strip().strip('"'))
    return found


_WGET_VALUES = words(
    "-O --output-document -o --output-file -a --append-output -e --execute --config -P --directory-prefix"
    " --save-cookies --load-cookies --warc-file --use-askpass -i --input-file -U --user-agent --header -t --tries"
    " -T --timeout -w --wait --limit-rate -Q --quota -l --level --post-data --post-file --method --body-data"
    " --body-file --user --password --http-user --http-password -B --base --bind-address"
)
_WGET_WRITES = words("-o --output-file -a --append-output --save-cookies --warc-file")
_WGETRC_WRITES = {
    "output_document": "-O",
    "logfile": "-o",
    "save_cookies": "--save-cookies",
    "warc_file": "--warc-file",
}


def wget_verdict(call: Call) -> Verdict:
    options, _urls = read_options(call.words, _WGET_VALUES)
    options += _wgetrc_options(options)
    names = {name for name, _value in options}
    if any(name.startswith(("--post", "--method", "--body")) for name in names):
        return verdict(2, "HTTP request that changes a remote resource")
    document = next((value for name, value in options if name in ("-O", "--output-document")), None)
    found = [verdict(0, "HTTP GET to stdout") if document == "-" or "--spider" in names else verdict(1, "downloads")]
    shell: list[str] = []
    for name, value in options:
        if name in _WGET_WRITES and value and value != "-":
            found.append(writes_onto(value, "wget") or verdict(1, f"wget writes {value}"))
        elif name in ("-O", "--output-document") and value and value != "-":
            found.append(writes_onto(value, "wget") or verdict(1, "downloads to a file"))
        elif name == "--config" and value:
            found.append(verdict(1, f"wget reads its settings from {value}, which are not seen"))
        elif name == "--use-askpass" and value:
            shell.append(value)
    worst = max(found, key=lambda item: item.tier)
    return Verdict(worst.tier, worst.reason, shell=tuple(shell)) if shell else worst


def _wgetrc_options(options: list[Option]) -> list[Option]:
    """wget -e 'name = value': the wgetrc commands that write files, as the options they stand for."""
    found: list[Option] = []
    for name, value in options:
        if name in ("-e", "--execute") and value:
            key, _equals, setting = value.partition("=")
            key = key.strip().lower().replace("-", "_")
            if key in _WGETRC_WRITES:
                found.append((_WGETRC_WRITES[key], setting.strip()))
            elif key.startswith(("post", "method", "body")):
                found.append(("--post-data", setting.strip()))
            elif key == "use_askpass":
                found.append(("--use-askpass", setting.strip()))
    return found


_SSH_VALUES = words("-b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w -B -P")
# ssh_config keys whose value is a command ssh runs locally (through the user's shell), or a library it loads.
_SSH_COMMANDS = words("proxycommand localcommand knownhostscommand xauthlocation")
# ssh_config keys naming a file ssh writes (a learnt host key is appended, a control socket is made).
_SSH_WRITTEN = words("userknownhostsfile controlpath")
_SSH_LIBRARIES = words("pkcs11provider securitykeyprovider")
_SSH_OPTION = re.compile(r"\s*([A-Za-z0-9]+)\s*(?:=\s*|\s+)(.*)", re.DOTALL)


def ssh_options(options: list[Option]) -> tuple[list[str], list[tuple[int, str]]]:
    """The local commands an ssh-family command line's options run, and what else they do (tier, reason)."""
    commands: list[str] = []
    effects: list[tuple[int, str]] = []
    for name, value in options:
        if name == "-o" and value:
            key, setting = _ssh_option(value)
            if key in _SSH_COMMANDS and setting and setting.lower() != "none":
                commands.append(re.sub(r"%[a-zA-Z%]", "x", setting))
            elif key in _SSH_LIBRARIES and setting and setting.lower() != "none":
                effects.append((2, f"ssh -o {key} loads a library: code that cannot be seen"))
            elif key == "include":
                effects.append((1, "ssh -o Include reads configuration that is not seen"))
            elif key in _SSH_WRITTEN and setting and setting.lower() != "none":
                onto = writes_onto(setting.split()[0], f"ssh -o {key} writes")
                if onto is not None:
                    effects.append((onto.tier, onto.reason))
        elif name == "-F" and value:
            piped = value.startswith(("/dev/stdin", "/dev/fd/", "/proc/")) or value == "-"
            effects.append((2 if piped else 1, f"ssh -F reads configuration from {value}, which is not seen"))
        elif name == "-I" and value:
            effects.append((2, "ssh -I loads a PKCS#11 library: code that cannot be seen"))
        elif name == "-E" and value:
            effects.append((1, f"ssh -E writes its log to {value}"))
        elif name == "-S" and value and value != "none":
            commands.append(value)  # scp and sftp: the program run instead of ssh (ssh's own -S is a socket path)
    return commands, effects


def _ssh_option(value: str) -> tuple[str, str]:
    """`-o Key=Value` or `-o 'Key Value'`: the key (lower case, as ssh compares it) and the value."""
    match = _SSH_OPTION.match(value)
    if match is None:
        return value.strip().lower(), ""
    return match.group(1).lower(), match.group(2).strip().strip("\"'")


def ssh_verdict(call: Call) -> Verdict:
    words_ = call.words
    options, operands = read_options(words_, _SSH_VALUES, permute=False)
    exposed = any(name == "-R" for name, _value in options) or call.has("-g")
    tier, reason = (2, "ssh -R opens a listener on the remote host") if exposed else (1, "ssh session")
    commands, effects = ssh_options([(name, value) for name, value in options if name != "-S"])
    remote = operands[1:]
    shell = tuple(commands)
    if remote:
        # The remote command decides the tier: `ssh host uptime` is 0, `ssh host rm -rf /srv` is 3.
        forwards = any(name in ("-L", "-D", "-W") for name, _value in options)
        tier, reason = max(tier if exposed else 0, 1 if forwards else 0), "ssh runs a remote command"
        shell += (" ".join(remote),)
    for effect in effects:
        if effect[0] > tier:
            tier, reason = effect
    if commands and tier == 0:
        reason = "ssh runs a local command from its options"
    return Verdict(tier, reason, shell=shell)


_SCP_VALUES = words("-c -D -F -i -J -l -o -P -S -X")


def scp_verdict(call: Call) -> Verdict:
    """scp and sftp copy files (1); their -o options and -S program run commands; sftp -D runs a local server."""
    options, _operands = read_options(call.words, _SCP_VALUES)
    commands, effects = ssh_options(options)
    if call.program == "sftp":
        commands += [value for name, value in options if name == "-D" and value]
    tier, reason = max([(1, f"{call.program} copies files"), *effects])
    return Verdict(tier, reason, shell=tuple(commands))
