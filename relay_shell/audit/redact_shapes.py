"""Secret shapes that need a scan of their own, used by `redact`: webhook URLs whose path is the secret (Slack,
Discord, Teams, Google Chat, Zapier, IFTTT, Mattermost), credentials in a URL's path (`relay-shell://inventory/
user:pass@host`, percent-encoded too), PowerShell secure strings (`ConvertTo-SecureString 'pw' -AsPlainText`) and
Windows `net user NAME PASSWORD`.

Linear time, like the rest of redaction: every pattern starts only at the start of a run (lookbehind) and
consumes runs possessively; the path scan splits each URL once.
"""

from __future__ import annotations

from relay_shell.audit.patterns import compile_pattern

REDACTED = "[REDACTED]"

# The part of a webhook URL before its secret, then the secret: everything up to the end of the URL.
_WEBHOOK = compile_pattern(
    r"(?i)(?<![\w.-])((?:https?://)?(?:"
    r"hooks\.slack\.com/(?:services|workflows|triggers)/"
    r"|(?:(?:ptb|canary)\.)?discord(?:app)?\.com/api/(?:v\d{1,2}/)?webhooks/\d++/"
    r"|[\w-]++\.webhook\.office\.com/webhookb2/"
    r"|outlook\.office(?:365)?\.com/webhook/"
    r"|chat\.googleapis\.com/v1/spaces/[\w-]++/messages\?"
    r"|hooks\.zapier\.com/hooks/catch/"
    r"|maker\.ifttt\.com/trigger/[\w-]++/with/key/"
    r"|[\w.-]++(?::\d++)?/hooks/(?=[A-Za-z0-9]{20})"
    r"|[\w.-]++(?::\d++)?/(?:api/)?webhooks?/(?=[\w-]{20})"
    r"))([^\s\"'<>`\\)]++)"
)


def redact_webhooks(text: str) -> str:
    lowered = text.lower()
    if "hook" not in lowered and "chat.googleapis" not in lowered and "ifttt" not in lowered:
        return text
    return _WEBHOOK.sub(lambda match: match.group(1) + REDACTED, text)


_URL = compile_pattern(r"(?<![\w+.-])[A-Za-z][\w+.-]*+://[^\s\"'<>`\\]++")
# `user:password@host` as one path segment; `%3A` and `%40` are ':' and '@' percent-encoded. Not an image digest
# (`app:1.2@sha256:…`). Anchored, so one attempt per segment; the user part cannot hold the separator that must
# follow it, so backtracking is linear. (No possessive loop here: Python 3.11.2 mismatches `(?:(?!x)y)++`.)
_PATH_CREDENTIALS = compile_pattern(r"^([^:@%]+)(:|%3[aA])((?:(?!%40)[^@])+)(@|%40)(?!sha\d)(.)")


def redact_path_credentials(text: str) -> str:
    """Credentials in a URL's path: the authority's own `user:pass@` is the URL pass's job."""
    if "://" not in text:
        return text

    def one(url: str) -> str:
        head, separator, path = url.partition("://")
        authority, slash, rest = path.partition("/")
        if not slash or ("@" not in rest and "%40" not in rest):
            return url
        segments = rest.split("/")
        for index, segment in enumerate(segments):
            match = _PATH_CREDENTIALS.match(segment)
            if match is not None and match.group(3) != REDACTED:
                user, colon, _password, at, _first = match.groups()
                segments[index] = f"{user}{colon}{REDACTED}{at}{segment[match.end(4) :]}"
        return f"{head}{separator}{authority}/{'/'.join(segments)}"

    return _URL.sub(lambda match: one(match.group()), text)


# ConvertTo-SecureString [-AsPlainText] [-Force] [-String] VALUE: the value is the secret (a variable is not).
_SECURE_STRING = compile_pattern(
    r"(?i)(?<![\w-])(convertto-securestring(?:[ \t]++-(?:asplaintext|force|string)\b){0,3}[ \t]++)"
    r"(\"(?:[^\"`\n]|`.)*+\"?|'[^'\n]*+'?|(?![$(-])[^\s)]++)"
)
# net user NAME PASSWORD [/add]: the second operand (`*` prompts, `/x` is a switch).
_NET_USER = compile_pattern(r"(?i)(?<![\w-])(net(?:\.exe)?[ \t]++user[ \t]++[^\s/]++[ \t]++)([^\s/*][^\s]*+)")


def redact_windows(text: str) -> str:
    lowered = text.lower()
    if "convertto-securestring" in lowered:
        text = _SECURE_STRING.sub(lambda match: match.group(1) + _quoted_mask(match.group(2)), text)
    if "net" in lowered and "user" in lowered:
        text = _NET_USER.sub(lambda match: match.group(1) + _quoted_mask(match.group(2)), text)
    return text


def _quoted_mask(value: str) -> str:
    for quote in ('"', "'"):
        if len(value) >= 2 and value.startswith(quote) and value.endswith(quote):
            return f"{quote}{REDACTED}{quote}"
    return REDACTED
