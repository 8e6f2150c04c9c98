"""Credentials in URLs: in the authority of any scheme (`https://user:pw@host`, postgres, mysql, redis, amqp,
mongodb+srv, …), in a URL's path (`relay-shell://inventory/user:pass@host`, percent-encoded too), and webhook URLs
whose path is the secret (Slack, Discord, Teams, Google Chat, Zapier, IFTTT, Mattermost).

Linear time, like the rest of redaction: every pattern starts only at the start of a run (lookbehind) and
consumes runs possessively; the path scan splits each URL once.
"""

from __future__ import annotations

from relay_shell.redaction.pattern_compiler import compile_pattern
from relay_shell.redaction.values import REDACTED, keep_code

# The scheme may only start where a run of scheme characters starts (lookbehind) and is consumed
# possessively, so each run is tried once. The user part stops at ':' possessively; the password then
# backtracks only to the last '@' before the end of the authority (whitespace, '/', '?', '#', a quote),
# and the next `://` always holds a '/', so no two attempts scan the same authority: linear.
# `user@host` (no password) and `host:port` (no '@') do not match.
_URL_CREDENTIALS = compile_pattern(
    r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*+://[^\s/?#@:\"'<>`\\]*+:)([^\s/?#\"'<>`\\]+)@"
)


def redact_url_credentials(text: str) -> str:
    if "://" not in text:
        return text
    return _URL_CREDENTIALS.sub(lambda match: f"{match.group(1)}{keep_code(match.group(2))}@", text)


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
    return _WEBHOOK.sub(lambda match: match.group(1) + keep_code(match.group(2)), text)


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
                user, colon, password, at, _first = match.groups()
                segments[index] = f"{user}{colon}{keep_code(password)}{at}{segment[match.end(4) :]}"
        return f"{head}{separator}{authority}/{'/'.join(segments)}"

    return _URL.sub(lambda match: one(match.group()), text)
