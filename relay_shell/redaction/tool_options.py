"""Options that carry a password only for particular tools (`-p` is a port for ssh, a password for mysql): the table
of tools and their secret options, and the pass over text that finds them in each tool's own simple command.
(In an argv the same table is read item by item: redact.py.)"""

from __future__ import annotations

import re

from relay_shell.redaction.pattern_compiler import compile_pattern
from relay_shell.redaction.values import VALUE, mask_user_password, secret_value_at

WHOLE = "whole"  # the option's value is the secret
_USER_PASSWORD = "user:password"  # the value is user:password; only the password is secret

# (tools, their secret options). The options are only looked at in the tool's own simple command.
# fmt: off
_TOOL_GROUPS: tuple[tuple[tuple[str, ...], dict[str, str]], ...] = (
    (
        ("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump", "mysqlsh",
         "mariadb", "mariadb-dump", "mariadb-admin", "sshpass", "mongo", "mongosh", "mongodump", "mongorestore",
         "mongoexport", "mongoimport", "7z", "7za", "7zz", "docker login", "podman login", "buildah login",
         "skopeo login", "oras login", "helm registry login"),
        {"-p": WHOLE},
    ),
    (("redis-cli",), {"-a": WHOLE}),
    (("az login", "useradd", "usermod"), {"-p": WHOLE}),  # useradd/usermod: the password hash
    (("openssl",), {"-k": WHOLE}),  # openssl enc -k PASSWORD
    (("gh secret set",), {"-b": WHOLE, "--body": WHOLE}),
    (
        ("ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami", "ldappasswd", "ldapcompare"),
        {"-w": WHOLE},
    ),
    (("zip", "unzip", "sqlcmd", "bcp"), {"-P": WHOLE}),
    (("ssh-keygen",), {"-N": WHOLE, "-P": WHOLE}),
    (("curl",), {"-u": _USER_PASSWORD, "--user": _USER_PASSWORD, "-U": _USER_PASSWORD, "--proxy-user": _USER_PASSWORD}),
    (("http", "https", "xh"), {"-a": _USER_PASSWORD, "--auth": _USER_PASSWORD}),
)
# fmt: on
TOOL_SECRET_OPTIONS = {tool: options for tools, options in _TOOL_GROUPS for tool in tools}
_TOOL_FIRST_WORDS = frozenset(tool.split()[0] for tool in TOOL_SECRET_OPTIONS)
# One C-level scan instead of a Python loop over every tool name: most texts mention none of them.
_ANY_TOOL_WORD = compile_pattern("|".join(re.escape(word) for word in sorted(_TOOL_FIRST_WORDS)))
# Wrappers whose own options come before the wrapped command: `sshpass -p X ssh -p 2222 host`.
WRAPPERS = frozenset({"sshpass"})

# A tool name as a whole word (also after a path: /usr/bin/mysql), not `mysql-client`, `mysql.service`,
# `/var/lib/mysql/`, or `http://`. Alternatives of literals: constant work per start.
_TOOL = (
    r"(?<![\w.-])(?P<tool>"
    + "|".join(
        re.escape(tool).replace(r"\ ", r"[ \t]++") for tool in sorted(TOOL_SECRET_OPTIONS, key=len, reverse=True)
    )
    + r")(?![\w./:-])"
)
_TOOL_NAME = compile_pattern(_TOOL)
# Inside a tool's command: the end of the simple command, another tool (`sshpass -p x mysql -py`), or an
# option word: `-p`, `-pSECRET` (value attached), `--long-name`, openssl's `-key`. Every alternative
# consumes at least one character, so one forward scan covers the text.
_TOOL_OR_OPTION = compile_pattern(r"(?P<end>[;&|\n])|" + _TOOL + r"|(?<![^\s\"'])(?P<option>--?[A-Za-z][\w-]*+)")
_BLANKS = compile_pattern(r"[ \t]*+")
# Tools whose options are whole words, never a letter with the value attached (`openssl x509 -keyform`).
NO_ATTACHED_VALUES = frozenset({"openssl"})


def redact_tool_options(text: str) -> str:
    if _ANY_TOOL_WORD.search(text) is None:
        return text
    pieces: list[str] = []
    copied = 0
    position = 0
    tool_name = ""
    secret_options: dict[str, str] = {}  # of the tool whose command we are in; empty between commands
    while (found := (_TOOL_OR_OPTION if secret_options else _TOOL_NAME).search(text, position)) is not None:
        position = found.end()
        if found.group("tool") is not None:
            tool_name = " ".join(found.group("tool").split())
            secret_options = TOOL_SECRET_OPTIONS[tool_name]
            continue
        word = found.group("option")
        if word is None:  # end of the command
            secret_options = {}
            continue
        if word in secret_options:
            kind = secret_options[word]
            value_start = position
            if text.startswith("=", value_start) and word.startswith("--"):
                value_start += 1  # --user=me:pw
            elif text.startswith((" ", "\t"), value_start):
                blanks = _BLANKS.match(text, value_start)
                value_start = blanks.end() if blanks else value_start
                if text.startswith("-", value_start):
                    continue  # `mysql -p -h db`: -p alone prompts for the password
        elif word[:2] in secret_options and word[1] != "-" and tool_name not in NO_ATTACHED_VALUES:
            kind = secret_options[word[:2]]
            value_start = found.start() + 2  # -pSECRET
        else:
            continue
        if kind == WHOLE:
            found_value = secret_value_at(text, value_start)  # code in it (`-p"$(cat F)"`) is not masked
        else:
            value = VALUE.match(text, value_start)
            masked = None if value is None else mask_user_password(value.group())
            found_value = None if value is None or masked is None else (value.end(), masked)
        if found_value is None:
            continue
        pieces.append(text[copied:value_start])
        pieces.append(found_value[1])
        copied = position = found_value[0]  # a quoted value may contain ';': it does not end the command
        if tool_name in WRAPPERS:
            secret_options = {}  # sshpass's -p is done; a -p in the wrapped command is its own (ssh: a port)
    if not pieces:
        return text
    pieces.append(text[copied:])
    return "".join(pieces)
