"""Secret redaction for audit records.

Every string argument of every tool call passes through `redact` before it is written to the audit log, so
two properties matter more than cleverness:

* Names survive, values do not: `DB_PASSWORD=[REDACTED]`, `--token [REDACTED]`, `Authorization: Bearer
  [REDACTED]`, `https://user:[REDACTED]@host/`. An auditor sees *which* secret was passed, never the secret.
* Time is linear in the input, whatever the input. Arguments can be megabyte scripts written by an adversary,
  and Python's `re` backtracks. Every pattern below is built so that a match attempt can only start at the
  beginning of a run (a negative lookbehind on the run's own characters), runs are consumed with possessive
  quantifiers (`++`, `*+`) so a failed attempt never retries shorter prefixes, and every loop resumes
  *after* what it has examined. The comment on each pattern says why it is linear; the tests time each one
  on adversarial megabytes.

Redaction is a series of passes over the text, most specific first: private key blocks, URL credentials,
provider token formats, Authorization headers, named values (KEY=value, "key": value, --flag value), and
options that are passwords only for particular tools (mysql -p). Each pass replaces secrets with text that
no pass matches again in a different way, so `redact(redact(x)) == redact(x)`.
"""

from __future__ import annotations

import re

from relay_shell.audit.patterns import compile_pattern
from relay_shell.audit.redact_shapes import redact_path_credentials, redact_webhooks, redact_windows
from relay_shell.audit.secret_names import NOT_SECRET, SECRET_HEADER_NAMES, WEAK, is_secret_name, secret_name_strength

REDACTED = "[REDACTED]"
REDACTED_PRIVATE_KEY = "[REDACTED PRIVATE KEY]"

# --------------------------------------------------------------------------------------------------------------
# Values: one shell-like word after a name (`NAME=<value>`, `--flag <value>`, `"key": <value>`).
# --------------------------------------------------------------------------------------------------------------

# A word is a possessive loop over pieces, and no piece can fail after scanning: quoted strings and `${…}` /
# `$(…)` / backquotes have an *optional* closer, so an unterminated one simply runs to the end of the line
# (as the shell would read it). Nothing follows the loop, so a match never backtracks: it is linear in its
# own length, and callers resume after it. `[REDACTED]` comes first so already-redacted text is one piece
# (`]` otherwise ends a word). Unquoted pieces end at whitespace and at characters that end a shell word
# or a value in a query string, JSON object or connection string (`;&|,<>)}]` and backquote).
_WORD_PIECE = (
    r"\[REDACTED\]"
    r"|\$\{[^}\n]*+\}?\}?"  # ${VAR}, ${{ secrets.X }}
    r"|\([^)\n]*+\)?"  # $(command), f(x): keeps the ')' with its '('
    r"|`[^`\n]*+`?"  # `command`
    r"|\\[^\n]"  # backslash escape, including \" inside a JSON-encoded string
    # A run of plain characters in one step (a loop iteration per character costs the matcher a saved
    # state each); `$`, `(` and `[` may start a piece above, so they are single steps of their own.
    r"|[^\s\"'`;&|,<>)}\]\\$(\[]++"
    r"|[$(\[]"
)
_DOUBLE_QUOTED_REST = r'(?:[^"\\\n]++|\\.)*+"?'
_SINGLE_QUOTED_REST = r"[^'\n]*+'?"
# Inside a word, a quote followed by whitespace, a separator or the end closes an enclosing string
# (`echo "token: $TOKEN"`, `["password=x", "y"]`) instead of opening a quoted piece.
_AFTER_CLOSING_QUOTE = r"(?:[\s,;&|)}\]]|\Z)"
_OPENS = r"(?!" + _AFTER_CLOSING_QUOTE + ")"
_VALUE = compile_pattern(
    r'(?:"' + _DOUBLE_QUOTED_REST + "|'" + _SINGLE_QUOTED_REST + "|" + _WORD_PIECE + ")"
    r'(?:"' + _OPENS + _DOUBLE_QUOTED_REST + "|'" + _OPENS + _SINGLE_QUOTED_REST + "|" + _WORD_PIECE + ")*"
)

_QUOTES = ('\\"', '"', "'")


def _mask(value: str) -> str:
    """REDACTED for a value, keeping the quotes of a fully quoted value so JSON and shell text stay readable."""
    for quote in _QUOTES:
        if len(value) >= 2 * len(quote) and value.startswith(quote) and value.endswith(quote):
            if value == quote * 2:
                return value  # an empty string hides nothing
            return f"{quote}{REDACTED}{quote}"
    return REDACTED


def _mask_user_password(word: str) -> str | None:
    """For `user:password` (curl -u, httpie -a) redact only the password; None when there is none."""
    user, colon, password = word.partition(":")
    if not colon or not password:
        return None  # `curl -u user` prompts for the password
    # A quote left open in the user part ('me:pw') is closed again, so the text stays balanced.
    closing_quote = "".join(quote for quote in "\"'" if user.count(quote) % 2)
    return f"{user}:{REDACTED}{closing_quote}"


# --------------------------------------------------------------------------------------------------------------
# Which names are secrets.
# --------------------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------------------
# Pass 1: private key blocks.
# --------------------------------------------------------------------------------------------------------------

# The label is bounded ({0,40}), so an attempt does constant work; the END marker is then found with
# str.find from the BEGIN, and the search resumes after the block (or the text ends: an unterminated key
# is redacted to the end). Also matches `---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----` and PGP key blocks.
_PRIVATE_KEY_START = compile_pattern(
    r"-{4,5} ?BEGIN ([A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?) ?-{4,5}|PuTTY-User-Key-File-[0-9]{1,3}:"
)
_PUTTY_LAST_LINE = "Private-MAC:"


def _redact_private_keys(text: str) -> str:
    if "PRIVATE KEY" not in text and "PuTTY-User-Key-File-" not in text:
        return text
    pieces: list[str] = []
    position = 0
    while (start := _PRIVATE_KEY_START.search(text, position)) is not None:
        pieces.append(text[position : start.start()])
        pieces.append(REDACTED_PRIVATE_KEY)
        label = start.group(1)
        if label is not None:
            end_marker = f"END {label}"
            found = text.find(end_marker, start.end())
            if found == -1:
                position = len(text)
                break
            position = found + len(end_marker)
            closing_limit = position + 6  # the " -----" after the label
            while position < min(closing_limit, len(text)) and text[position] in " -":
                position += 1
        else:
            found = text.find(_PUTTY_LAST_LINE, start.end())
            line_end = -1 if found == -1 else text.find("\n", found)
            position = len(text) if line_end == -1 else line_end
    pieces.append(text[position:])
    return "".join(pieces)


# --------------------------------------------------------------------------------------------------------------
# Pass 2: credentials in URLs, any scheme: https, postgres, mysql, redis, amqp, mongodb+srv, …
# --------------------------------------------------------------------------------------------------------------

# The scheme may only start where a run of scheme characters starts (lookbehind) and is consumed
# possessively, so each run is tried once. The user part stops at ':' possessively; the password then
# backtracks only to the last '@' before the end of the authority (whitespace, '/', '?', '#', a quote),
# and the next `://` always holds a '/', so no two attempts scan the same authority: linear.
# `user@host` (no password) and `host:port` (no '@') do not match.
_URL_CREDENTIALS = compile_pattern(
    r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*+://[^\s/?#@:\"'<>`\\]*+:)([^\s/?#\"'<>`\\]+)@"
)


def _redact_url_credentials(text: str) -> str:
    if "://" not in text:
        return text
    return _URL_CREDENTIALS.sub(lambda match: f"{match.group(1)}{REDACTED}@", text)


# --------------------------------------------------------------------------------------------------------------
# Pass 3: provider token formats, wherever they appear, and bare bearer tokens.
# --------------------------------------------------------------------------------------------------------------

# One alternation, bounded on both sides by "not a token character": an attempt starts only at the start
# of a run, each alternative is a fixed prefix plus a possessive or fixed-length run (JWT and SendGrid span
# at most three dot-separated runs), and nothing after a run can make it retry: linear. The right-hand
# boundary also guarantees that a replacement never exposes the start of another token (idempotence).
_PROVIDER_TOKEN = compile_pattern(
    r"(?<![A-Za-z0-9_-])(?:"
    r"A(?:KIA|SIA)[A-Z0-9]{16}"  # AWS access key id
    r"|gh[pousr]_[A-Za-z0-9]{30,}+"  # GitHub classic, OAuth, user-to-server, server-to-server, refresh
    r"|github_pat_[A-Za-z0-9_]{30,}+"  # GitHub fine-grained
    r"|glpat-[A-Za-z0-9_-]{20,}+"  # GitLab personal access token
    r"|xox[abprs]-[A-Za-z0-9-]{10,}+"  # Slack
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}+"  # Stripe secret and restricted keys
    r"|sk-[A-Za-z0-9_-]{20,}+"  # OpenAI (sk-, sk-proj-) and Anthropic (sk-ant-)
    r"|AIza[A-Za-z0-9_-]{35}"  # Google API key
    r"|eyJ[A-Za-z0-9_-]{8,}+\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]*+"  # JWT (header.payload.signature)
    r"|npm_[A-Za-z0-9]{30,}+"  # npm
    r"|pypi-[A-Za-z0-9_-]{40,}+"  # PyPI
    r"|hf_[A-Za-z0-9]{30,}+"  # Hugging Face
    r"|SG\.[A-Za-z0-9_-]{16,}+\.[A-Za-z0-9_-]{16,}+"  # SendGrid
    r"|SK[0-9a-f]{32}"  # Twilio API key
    r"|do[opr]_v1_[a-f0-9]{64}"  # DigitalOcean
    r"|hv[sb]\.[A-Za-z0-9_-]{20,}+"  # HashiCorp Vault
    r"|shp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}"  # Shopify
    r")(?![A-Za-z0-9_-])"
)

# A bearer token outside an Authorization header. Needs a digit (within the token: the lazy scan stops
# at the token's end) and 8+ characters, so "the bearer of this letter" is prose.
_BEARER_TOKEN = compile_pattern(r"(?i)(?<![\w-])(bearer[ \t]++)(?=[\w.~+/=-]*?[0-9])[\w.~+/=-]{8,}+")


def _redact_provider_tokens(text: str) -> str:
    text = _PROVIDER_TOKEN.sub(REDACTED, text)
    if "bearer" not in text.lower():
        return text
    return _BEARER_TOKEN.sub(lambda match: f"{match.group(1)}{REDACTED}", text)


# --------------------------------------------------------------------------------------------------------------
# Pass 4: Authorization headers (HTTP dumps, curl -H, JSON header maps).
# --------------------------------------------------------------------------------------------------------------

# Anchored at the literal header name (lookbehind: not inside a longer word); the separator is bounded;
# the scheme is kept so the log says what kind of credential it was. The credential is one possessive
# token with nothing after it, so an attempt cannot fail after scanning. Needs ':' or '=': "Authorization"
# in prose is left alone.
# Schemes with comma-separated parameters (`Digest username="u", response="…"`, `AWS4-HMAC-SHA256 Credential=…,
# Signature=…`): the whole list is the credential. Each parameter starts with a name and '=', its value is quoted
# (JSON-escaped quotes too) or a run without separators; every loop is possessive, so the list is read once.
_AUTHORIZATION_PARAMETERS = (
    r"(?:[\w-]++=(?:\"(?:[^\"\\\n]|\\.)*+\"?|\\\"(?:[^\"\\\n]|\\[^\"\n])*+(?:\\\")?|[^\s,\"'\\=][^\s,\"'\\]*+)"
    r"(?:[ \t]*+,[ \t]*+(?=[\w-]++=))?)+"
)
_AUTHORIZATION_HEADER = compile_pattern(
    r"(?i)(?<![\w-])((?:proxy-)?authorization\\?[\"']?[ \t]*+[:=][ \t]*+\\?[\"']?"
    r"(?:(?:bearer|basic|digest|token|negotiate|ntlm|bot|oauth|apikey|aws4-hmac-sha256|sso-key|ssws|jwt|key|hoba"
    r"|mutual|vapid|scram-sha-256|scram-sha-1)[ \t]++)?)"
    r"(?:" + _AUTHORIZATION_PARAMETERS + r"|[^\s\"'\\]++)"
)


def _redact_authorization_headers(text: str) -> str:
    if "authorization" not in text.lower():  # substring search is far cheaper than a regex scan
        return text
    return _AUTHORIZATION_HEADER.sub(lambda match: f"{match.group(1)}{REDACTED}", text)


# --------------------------------------------------------------------------------------------------------------
# Pass 5: named values: KEY=value, key: value, "key": "value", --flag value, --flag=value.
# --------------------------------------------------------------------------------------------------------------

# A candidate is a whole run of name characters (lookbehind: only at the start of a run; possessive: the
# run is consumed once) that contains a secret stem. The lookahead scans at most the run, and only from
# the run's start, so the total is linear. The name is then judged in Python and the value is matched
# only for secret names: for other names the loop resumes right after the name, never scanning a value
# (`--from-literal=password=x` still finds `password=x`).
_SECRET_STEMS = ("pass", "pw", "secret", "token", "key", "cred", "auth", "sig", "bearer")
# One C-level scan instead of a Python loop over the stems: most texts mention none of them.
_ANY_SECRET_STEM = compile_pattern("|".join(re.escape(stem) for stem in sorted(_SECRET_STEMS)))
_SECRET_NAME_CANDIDATE = compile_pattern(r"(?<![\w.-])(?=[\w.-]*?(?i:" + "|".join(_SECRET_STEMS) + r"))[\w.-]++")
# Closing quote of a quoted key, then '=', ':', ':=' or '=>' (not '==': a comparison). Bounded spaces.
_ASSIGNMENT = compile_pattern(r"\\?[\"']?[ \t]*+(?P<operator>:=|=>|=(?!=)|:)[ \t]*+")
# `--password x`, `"--password" "x"`, `"--password", "x"`.
_FLAG_GAP = compile_pattern(r"\\?[\"']?,?[ \t]++")
_FLAG_OPERATOR = " "
# `aws secretsmanager get-secret-value --secret-id prod/db` names a secret; `secret_id=` (Vault) is one.
_IDENTIFIER_FLAG_SUFFIXES = ("-id", "-ids", "-arn", "_id")
# After an unquoted name, a quote followed by whitespace, a separator or the end closes a string that mentions
# the name (`echo 'Enter your password:'`); it does not open a value. After a quoted name it does
# (`{"password": " x"}`).
_CLOSING_QUOTE = compile_pattern(r"\\?[\"']" + _AFTER_CLOSING_QUOTE)


def _value_start(text: str, name: str, name_end: int) -> tuple[int, str] | None:
    """Where the value after a name starts, and the operator before it (':', '=', ..., or a space for flags)."""
    assignment = _ASSIGNMENT.match(text, name_end)
    if assignment is not None:
        return assignment.end(), assignment.group("operator")
    if name.startswith("-") and not name.lower().endswith(_IDENTIFIER_FLAG_SUFFIXES):
        gap = _FLAG_GAP.match(text, name_end)
        if gap is not None and not text.startswith("-", gap.end()):
            return gap.end(), _FLAG_OPERATOR
    return None


def _redact_named_values(text: str) -> str:
    if _ANY_SECRET_STEM.search(text.lower()) is None:
        return text
    pieces: list[str] = []
    copied = 0  # text[:copied] is already in pieces
    position = 0
    while (candidate := _SECRET_NAME_CANDIDATE.search(text, position)) is not None:
        name = candidate.group()
        position = candidate.end()
        # A name right after '/' or '@' is a path or host (`https://token:x@h`, `registry/token-svc:1.0`).
        if candidate.start() > 0 and text[candidate.start() - 1] in "/@":
            continue
        found = _value_start(text, name, position)
        if found is None:
            continue
        value_start, operator = found
        strength = secret_name_strength(name)
        quoted_name = text.startswith(("\"", "'", "\\"), position)
        if strength == NOT_SECRET or (strength == WEAK and operator == ":" and not quoted_name):
            continue  # `auth: handle expiry` is prose; `"auth": "…"` and `pwd=…` are not
        if not quoted_name and _CLOSING_QUOTE.match(text, value_start):
            continue  # an unquoted name, then a quote that ends the string around it
        value = _VALUE.match(text, value_start)
        if value is None:
            continue
        pieces.append(text[copied:value_start])
        pieces.append(_mask(value.group()))
        copied = position = value.end()
    if not pieces:
        return text
    pieces.append(text[copied:])
    return "".join(pieces)


# `git config --global github.token X`, `npm config set //registry.npmjs.org/:_authToken X`,
# `aws configure set aws_secret_access_key X`, `redis-cli CONFIG SET requirepass X`: name and value
# separated by a space. Anchored at the command word; everything after it is possessive and at most six
# words long ({0,3}: an unbounded run of `set set set …` would be rescanned from every `set`), so each
# word is scanned by a bounded number of attempts.
_CONFIG_SET = compile_pattern(
    r"(?<![\w.-])(?i:config|configure|set|setx)(?:[ \t]++(?:--?[\w-]++|(?i:set|add)(?![\w.-]))){0,3}+[ \t]++"
    r"(?:[^\s:=]*+:)?([\w.-]++)[ \t]++"
)


def _redact_config_set(text: str) -> str:
    if "set" not in text.lower() and "config" not in text.lower():
        return text
    pieces: list[str] = []
    copied = 0
    position = 0
    while (command := _CONFIG_SET.search(text, position)) is not None:
        position = command.end()
        if not is_secret_name(command.group(1)):
            continue
        value = _VALUE.match(text, position)
        if value is None or value.group().startswith("-"):
            continue  # `gh secret set NAME --body …`: an option, not the value
        pieces.append(text[copied:position])
        pieces.append(_mask(value.group()))
        copied = position = value.end()
    if not pieces:
        return text
    pieces.append(text[copied:])
    return "".join(pieces)


# `<password>hunter2</password>` (Maven settings.xml and friends). Starts only at '<'; the content scan
# stops at the next '<', which is where the next attempt starts, so scans never overlap.
_XML_ELEMENT = compile_pattern(r"<([\w.:-]++)>([^<\n]++)</")


def _redact_xml_elements(text: str) -> str:
    if "</" not in text:
        return text
    return _XML_ELEMENT.sub(
        lambda match: f"<{match.group(1)}>{REDACTED}</" if is_secret_name(match.group(1)) else match.group(),
        text,
    )


# .netrc: `machine h login bob password X` on one line, or a line that is only `password X`. Anchored at
# `login` / a line start; possessive runs.
_NETRC_INLINE = compile_pattern(r"(?<![\w-])(login[ \t]++\S++[ \t]++password[ \t]++)\S++")
_NETRC_LINE = compile_pattern(r"(?m)^([ \t]*+password[ \t]++)\S++([ \t]*+)$")


def _redact_netrc(text: str) -> str:
    if "password" not in text:
        return text
    text = _NETRC_INLINE.sub(lambda match: f"{match.group(1)}{REDACTED}", text)
    return _NETRC_LINE.sub(lambda match: f"{match.group(1)}{REDACTED}{match.group(2)}", text)


# --------------------------------------------------------------------------------------------------------------
# Pass 6: options that carry a password only for particular tools (`-p` is a port for ssh, a password for
# mysql).
# --------------------------------------------------------------------------------------------------------------

_WHOLE = "whole"  # the option's value is the secret
_USER_PASSWORD = "user:password"  # the value is user:password; only the password is secret

# (tools, their secret options). The options are only looked at in the tool's own simple command.
_TOOL_GROUPS: tuple[tuple[tuple[str, ...], dict[str, str]], ...] = (
    (
        ("mysql", "mysqldump", "mysqladmin", "mysqlimport", "mysqlshow", "mysqlcheck", "mysqlpump", "mysqlsh",
         "mariadb", "mariadb-dump", "mariadb-admin", "sshpass", "mongo", "mongosh", "mongodump", "mongorestore",
         "mongoexport", "mongoimport", "7z", "7za", "7zz", "docker login", "podman login", "buildah login",
         "skopeo login", "oras login", "helm registry login"),
        {"-p": _WHOLE},
    ),
    (("redis-cli",), {"-a": _WHOLE}),
    (("az login", "useradd", "usermod"), {"-p": _WHOLE}),  # useradd/usermod: the password hash
    (("openssl",), {"-k": _WHOLE}),  # openssl enc -k PASSWORD
    (("gh secret set",), {"-b": _WHOLE, "--body": _WHOLE}),
    (
        ("ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami", "ldappasswd", "ldapcompare"),
        {"-w": _WHOLE},
    ),
    (("zip", "unzip", "sqlcmd", "bcp"), {"-P": _WHOLE}),
    (("ssh-keygen",), {"-N": _WHOLE, "-P": _WHOLE}),
    (("curl",), {"-u": _USER_PASSWORD, "--user": _USER_PASSWORD, "-U": _USER_PASSWORD, "--proxy-user": _USER_PASSWORD}),
    (("http", "https", "xh"), {"-a": _USER_PASSWORD, "--auth": _USER_PASSWORD}),
)
_TOOL_SECRET_OPTIONS = {tool: options for tools, options in _TOOL_GROUPS for tool in tools}
_TOOL_FIRST_WORDS = frozenset(tool.split()[0] for tool in _TOOL_SECRET_OPTIONS)
# One C-level scan instead of a Python loop over every tool name: most texts mention none of them.
_ANY_TOOL_WORD = compile_pattern("|".join(re.escape(word) for word in sorted(_TOOL_FIRST_WORDS)))
# Wrappers whose own options come before the wrapped command: `sshpass -p X ssh -p 2222 host`.
_WRAPPERS = frozenset({"sshpass"})

# A tool name as a whole word (also after a path: /usr/bin/mysql), not `mysql-client`, `mysql.service`,
# `/var/lib/mysql/`, or `http://`. Alternatives of literals: constant work per start.
_TOOL = (
    r"(?<![\w.-])(?P<tool>"
    + "|".join(
        re.escape(tool).replace(r"\ ", r"[ \t]++") for tool in sorted(_TOOL_SECRET_OPTIONS, key=len, reverse=True)
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
_NO_ATTACHED_VALUES = frozenset({"openssl"})


def _redact_tool_options(text: str) -> str:
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
            secret_options = _TOOL_SECRET_OPTIONS[tool_name]
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
        elif word[:2] in secret_options and word[1] != "-" and tool_name not in _NO_ATTACHED_VALUES:
            kind = secret_options[word[:2]]
            value_start = found.start() + 2  # -pSECRET
        else:
            continue
        value = _VALUE.match(text, value_start)
        if value is None:
            continue
        replacement = _mask(value.group()) if kind == _WHOLE else _mask_user_password(value.group())
        if replacement is None:
            continue
        pieces.append(text[copied:value_start])
        pieces.append(replacement)
        copied = position = value.end()  # a quoted value may contain ';': it does not end the command
        if tool_name in _WRAPPERS:
            secret_options = {}  # sshpass's -p is done; a -p in the wrapped command is its own (ssh: a port)
    if not pieces:
        return text
    pieces.append(text[copied:])
    return "".join(pieces)


# --------------------------------------------------------------------------------------------------------------
# Public API.
# --------------------------------------------------------------------------------------------------------------


# Short texts that redaction left as they were (argument names, session ids, `until` patterns: the same few on
# every call): redacting them again gives them again, so the dozen passes are skipped. Only texts the log
# writes in clear anyway are kept here, never one a pass changed, nor an argv item masked for its position
# (`_redact_argv` takes those out again): a secret is not kept in memory for this.
_UNCHANGED: dict[str, None] = {}
_UNCHANGED_MAX_TEXT = 256  # characters
_UNCHANGED_MAX_ENTRIES = 4096  # then it starts over: bounded memory, whatever the calls


def redact(text: str) -> str:
    """Return text with secrets replaced by [REDACTED], keeping the key/flag names so an auditor
    sees which secret was passed (e.g. 'DB_PASSWORD=[REDACTED]', '--token [REDACTED]',
    'Authorization: Bearer [REDACTED]', 'https://user:[REDACTED]@host/', '[REDACTED PRIVATE KEY]')."""
    if text in _UNCHANGED:
        return text
    redacted = _redact_all(text)
    if redacted == text and len(text) <= _UNCHANGED_MAX_TEXT:
        if len(_UNCHANGED) >= _UNCHANGED_MAX_ENTRIES:
            _UNCHANGED.clear()
        _UNCHANGED[text] = None
    return redacted


def _redact_all(text: str) -> str:
    text = _redact_private_keys(text)
    text = _redact_url_credentials(text)
    text = redact_path_credentials(text)
    text = redact_webhooks(text)
    text = _redact_provider_tokens(text)
    text = _redact_authorization_headers(text)
    text = redact_windows(text)
    text = _redact_named_values(text)
    text = _redact_config_set(text)
    text = _redact_xml_elements(text)
    text = _redact_netrc(text)
    # Last: which tool an option belongs to depends on the tool names still in the text, and the passes
    # above may redact one (inside a value). Running last keeps redact(redact(x)) == redact(x).
    return _redact_tool_options(text)


def redact_value(value: object) -> object:
    """Recursively redact every str in a JSON-like value (dict/list/str/other scalars unchanged).
    For dict entries whose KEY itself names a secret (password, token, secret, api_key, ...) the
    whole value is replaced by REDACTED (e.g. an env overlay {"DB_PASSWORD": "x"})."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {_redact_key(key, value): _redact_entry(key, item) for key, item in value.items()}
    if isinstance(value, list):
        return _redact_argv(value)
    if isinstance(value, tuple):
        return tuple(_redact_argv(list(value)))
    return value


def _redact_key(key: object, mapping: dict[object, object]) -> object:
    """A key that is itself a secret (a provider token used as an env overlay's *name*) is redacted too; a
    number keeps redacted keys apart, so no entry is lost."""
    if not isinstance(key, str):
        return key
    redacted = redact(key)
    if redacted == key:
        return key
    position = list(mapping).index(key)
    return redacted if position == 0 else f"{redacted} #{position}"


def _redact_entry(key: object, item: object) -> object:
    # None and booleans carry no secret ({"PASSWORD": null} unsets a variable; {"use_token": true}).
    carries_secret = item is not None and not isinstance(item, bool)
    if carries_secret and isinstance(key, str) and (is_secret_name(key) or key.lower() in SECRET_HEADER_NAMES):
        return REDACTED
    return redact_value(item)


def _redact_argv(items: list[object]) -> list[object]:
    """Redact each item, and the item after a secret flag: in an argv, `--password` and its value are
    separate strings (["mysql", "-u", "root", "-p", "x"], ["curl", "-u", "me:pw", url])."""
    redacted = [redact_value(item) for item in items]
    tool: str | None = None
    secret_options: dict[str, str] = {}
    for index, item in enumerate(items):
        if not isinstance(item, str):
            continue
        if (named_tool := _argv_tool(items, index)) is not None:
            tool, secret_options = named_tool, _TOOL_SECRET_OPTIONS[named_tool]
            continue
        attached = item[:2] in secret_options and item[1:2] != "-" and tool not in _NO_ATTACHED_VALUES
        if item not in secret_options and len(item) > 2 and attached:
            # The value is attached: "-psecret".
            kind = secret_options[item[:2]]
            target, prefix, word = index, item[:2], item[2:]
        elif item in secret_options or (item.startswith("-") and "=" not in item and is_secret_name(item)):
            # The value is the next item: ["-p", "x"], ["--password", "x"].
            kind = secret_options.get(item, _WHOLE)
            following = items[index + 1] if index + 1 < len(items) else None
            if not isinstance(following, str) or not following or following.startswith("-"):
                continue
            target, prefix, word = index + 1, "", following
        else:
            continue
        masked = REDACTED if kind == _WHOLE else _mask_user_password(word)
        if masked is not None:
            redacted[target] = prefix + masked
            # redact() saw the bare value as plain text and remembered it: a secret is not kept in memory.
            _UNCHANGED.pop(prefix + word, None)
        if tool in _WRAPPERS:
            secret_options = {}  # sshpass's -p is done; a -p in the wrapped command is its own (ssh: a port)
    return redacted


def _argv_tool(items: list[object], index: int) -> str | None:
    """The tool whose name ends at items[index]: "mysql", "/usr/bin/mysql", or "docker", "login"."""
    for length in (1, 2, 3):
        start = index - length + 1
        words = items[start : index + 1] if start >= 0 else []
        if not words or not all(isinstance(word, str) for word in words):
            return None
        names = [str(word) for word in words]
        candidate = " ".join([names[0].rsplit("/", 1)[-1], *names[1:]])
        if candidate in _TOOL_SECRET_OPTIONS:
            return candidate
    return None
