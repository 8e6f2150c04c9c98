"""git configuration that runs commands (git-config(1), githooks(5), gitattributes(5)): given on the command line
(`git -c KEY=VALUE`, `--config-env=KEY=VAR`) or through the environment (GIT_CONFIG_COUNT/KEY_n/VALUE_n,
GIT_CONFIG_PARAMETERS; code_env.py). A key whose value is a command line (`core.fsmonitor`, `core.pager`,
`core.sshCommand`, `diff.external`, `man.<tool>.cmd`, `alias.<name>=!…`, `credential.helper=!…`, filters, merge
and diff drivers, …) has its value classified as shell text; one that names a file git reads more configuration
or hooks from is 1; an `ext::` transport, in a key or a value, runs its command. Keys are matched as git matches
them: section and variable names without regard to case, the subsection exactly.
"""

from __future__ import annotations

from relay_shell.policy.calls import Verdict
from relay_shell.policy.vocabulary import words

# section.variable, or section.*.variable (any subsection), whose value is a command git runs through the shell.
_COMMAND_KEYS = words(
    "core.fsmonitor core.pager core.editor core.sshcommand core.askpass core.gitproxy core.alternaterefscommand"
    " sequence.editor diff.external diff.*.command diff.*.textconv merge.*.driver mergetool.*.cmd"
    " mergetool.*.path difftool.*.cmd difftool.*.path man.*.cmd man.*.path browser.*.cmd browser.*.path"
    " pager.* filter.*.clean filter.*.smudge filter.*.process remote.*.uploadpack remote.*.receivepack"
    " uploadpack.packobjectshook gpg.program gpg.*.program gpg.ssh.defaultkeycommand sendemail.smtpserver"
    " sendemail.*.smtpserver sendemail.tocmd sendemail.cccmd sendemail.headercmd imap.tunnel instaweb.httpd"
    " instaweb.browser interactive.difffilter hook.*.command submodule.*.update credential.helper"
    " credential.*.helper sendemail.sendmailcmd sendemail.*.sendmailcmd sendemail.*.tocmd sendemail.*.cccmd"
    " sendemail.*.headercmd guitool.*.cmd"
)
# Keys that make git read configuration, hooks or templates from a file or directory nobody sees.
_FILE_KEYS = words("include.path includeif.*.path core.hookspath init.templatedir safe.directory")
# Keys whose value names a file git writes.
_WRITTEN_KEYS = words("trace2.eventtarget trace2.normaltarget trace2.perftarget")
_BOOLEANS = frozenset(["true", "false", "yes", "no", "on", "off", "1", "0", "''"])


def config_verdict(key: str, value: str) -> Verdict:
    """What setting one git configuration key does."""
    if "ext::" in key or value.startswith("ext::"):
        text = value if value.startswith("ext::") else key[key.index("ext::") :].rsplit(".", 1)[0]
        return Verdict(2, "git's ext:: transport runs a command", commands=(ext_command(text),))
    name = _normalized(key)
    if name is None:
        return Verdict(0, "git configuration")
    if name.startswith("alias."):
        if value.startswith("!"):
            return Verdict(0, f"git alias {key} runs shell text", shell=(value[1:],))
        return Verdict(0, f"git alias {key} runs git {value}", shell=(f"git {value}",))
    if _matches(name, _COMMAND_KEYS):
        if value.lower() in _BOOLEANS or not value:
            return Verdict(1 if name == "core.fsmonitor" and value.lower() in ("true", "yes", "on", "1") else 0, key)
        if name.endswith("helper") and not value.startswith(("!", "/")):
            return Verdict(0, f"git {key} runs a credential helper", shell=(f"git-credential-{value}",))
        command = value[1:] if value.startswith("!") else value
        return Verdict(0, f"git {key} runs a command", shell=(command,))
    if _matches(name, _FILE_KEYS):
        return Verdict(1, f"git {key} reads configuration or hooks from a file that is not seen")
    if _matches(name, _WRITTEN_KEYS) and value.startswith(("/", "~", ".")):
        return Verdict(0, f"git {key} writes a trace", commands=(("tee", value),))
    if name.startswith("protocol.") and name.endswith(".allow") and value.lower() == "always":
        return Verdict(0, "git allows a transport")  # the transport's URL is classified where it is written
    return Verdict(0, "git configuration")


def _normalized(key: str) -> str | None:
    """`Section.Sub.Section.Variable` as git compares it: section and variable lower case, the subsection kept."""
    if "." not in key:
        return None
    section, _dot, rest = key.partition(".")
    subsection, _dot2, variable = rest.rpartition(".")
    if subsection:
        return f"{section.lower()}.{subsection}.{variable.lower()}"
    return f"{section.lower()}.{variable.lower()}"


def _matches(name: str, patterns: frozenset[str]) -> bool:
    if name in patterns:
        return True
    section, _dot, rest = name.partition(".")
    _subsection, dot, variable = rest.rpartition(".")
    if dot and f"{section}.*.{variable}" in patterns:
        return True
    return f"{section}.*" in patterns


def ext_command(url: str) -> tuple[str, ...]:
    """The argv of an `ext::` URL (git-remote-ext(1)): words split at spaces, `% ` a space inside a word, `%%` a
    percent sign, `%s`/`%S`/`%G`/`%V` what git fills in."""
    words_: list[str] = []
    current: list[str] = []
    text = url.removeprefix("ext::")
    index = 0
    while index < len(text):
        char = text[index]
        if char == "%" and index + 1 < len(text):
            following = text[index + 1]
            current.append({" ": " ", "%": "%", "s": "git-upload-pack", "S": "upload-pack"}.get(following, ""))
            index += 2
            continue
        if char == " ":
            if current:
                words_.append("".join(current))
            current = []
        else:
            current.append(char)
        index += 1
    if current:
        words_.append("".join(current))
    return tuple(words_) or ("ext",)
