"""One runbook file: its YAML front matter checked field by field, its chapters (the body's Markdown headings),
its summary and where its body starts. Pure: a file's bytes in, a Runbook or a RunbookProblem out.

A runbook's text is the team's guidance to the model, so a mistake in its front matter must not silently change
what the model sees: an unknown field (`priorty: 10` would quietly demote a guardrail), a value of the wrong type
or out of range is a problem that keeps the file out and is reported, never guessed around.
"""

from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass
from typing import Any

NAME_PATTERN = re.compile(r"[a-z0-9_-]{1,64}\Z")
# Argument names as the workflow prompts have them: they become keyword arguments and labels in the text.
ARGUMENT_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}\Z")
MODES = ("open", "guarded", "readonly")
FIELDS = ("name", "title", "summary", "priority", "tags", "arguments", "hosts", "modes")
DEFAULT_PRIORITY = 5
ALWAYS_INCLUDED = 10  # priority 10: a guardrail, part of every search result and briefing
MAX_TITLE = 200
MAX_SUMMARY = 500
SUMMARY_FROM_BODY = 240  # characters of the body's first sentence when there is no summary
MAX_TAGS = 64
MAX_TAG_CHARS = 64
MAX_ARGUMENTS = 16
MAX_DESCRIPTION = 500
MAX_HOSTS = 256
MAX_CHAPTERS = 256
MAX_CHAPTER_CHARS = 200

# `---` on the first line opens the front matter; the next `---` (or YAML's `...`) line closes it.
FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
HEADING = re.compile(r" {0,3}#{1,6}[ \t]+(.+?)[ \t#]*\Z")
FENCE = re.compile(r" {0,3}(```|~~~)")
SENTENCE_END = re.compile(r"[.!?](?=\s|\Z)")


class RunbookProblem(ValueError):
    """Why a file is not loaded; the message names the field and what is allowed."""


@dataclass(frozen=True)
class RunbookArgument:
    name: str
    description: str
    required: bool


@dataclass(frozen=True)
class Runbook:
    name: str
    title: str
    summary: str
    priority: int
    tags: tuple[str, ...]
    arguments: tuple[RunbookArgument, ...]
    hosts: tuple[str, ...]  # host names and @groups it concerns; empty: any
    modes: tuple[str, ...]  # the policy modes it is offered in
    chapters: tuple[str, ...]  # the body's headings, in order
    relpath: str  # the file, relative to RUNBOOK_DIR
    size: int  # bytes of the file
    body_start: int  # characters of front matter before the body
    sha256: str  # of the whole file as loaded

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "summary": self.summary,
            "priority": self.priority,
            "tags": list(self.tags),
            "arguments": [[item.name, item.description, item.required] for item in self.arguments],
            "hosts": list(self.hosts),
            "modes": list(self.modes),
            "chapters": list(self.chapters),
            "relpath": self.relpath,
            "size": self.size,
            "body_start": self.body_start,
            "sha256": self.sha256,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Runbook:
        return cls(
            name=value["name"],
            title=value["title"],
            summary=value["summary"],
            priority=int(value["priority"]),
            tags=tuple(value["tags"]),
            arguments=tuple(
                RunbookArgument(name, description, bool(required)) for name, description, required in value["arguments"]
            ),
            hosts=tuple(value["hosts"]),
            modes=tuple(value["modes"]),
            chapters=tuple(value["chapters"]),
            relpath=value["relpath"],
            size=int(value["size"]),
            body_start=int(value["body_start"]),
            sha256=value["sha256"],
        )


def name_from_path(relpath: str) -> str:
    """The default name: the file name without `.md`, lowercased, other characters turned into `-`."""
    stem = relpath.rsplit("/", 1)[-1]
    stem = stem[:-3] if stem.lower().endswith(".md") else stem
    return re.sub(r"[^a-z0-9_-]+", "-", stem.casefold()).strip("-")[:64]


def split_front_matter(text: str) -> tuple[str | None, int]:
    """The front matter's YAML text (None when the file has none) and where the body starts."""
    match = FRONT_MATTER.match(text)
    if match is None:
        if re.match(r"---[ \t]*\r?\n", text):
            raise RunbookProblem("front matter: opened by --- on the first line but never closed by a --- line")
        return None, 0
    return match.group(1), match.end()


def parse_runbook(relpath: str, data: bytes, sha256: str) -> Runbook:
    """The runbook in this file, or RunbookProblem saying what is wrong (the first problem found)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunbookProblem(f"not UTF-8 text (byte {exc.start})") from None
    text = text.removeprefix("\ufeff")
    yaml_text, body_start = split_front_matter(text)
    meta = load_front_matter(yaml_text) if yaml_text is not None else {}
    body = text[body_start:]
    if not body.strip():
        raise RunbookProblem("body: is empty; a runbook needs text after its front matter")
    unknown = [key for key in meta if key not in FIELDS]
    if unknown:
        raise RunbookProblem(f"front matter: unknown field {_shown(unknown[0])}; allowed: {', '.join(FIELDS)}")
    chapters = chapters_of(body)
    name = meta.get("name", name_from_path(relpath))
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise RunbookProblem(f"name: {_shown(name)} is not a valid name; allowed: 1 to 64 of a-z 0-9 _ -")
    title = _text(meta, "title", chapters[0] if chapters else name, MAX_TITLE)
    summary = _text(meta, "summary", first_sentence(body) or title, MAX_SUMMARY)
    return Runbook(
        name=name,
        title=title,
        summary=summary,
        priority=_priority(meta),
        tags=_words(meta, "tags", MAX_TAGS),
        arguments=_arguments(meta),
        hosts=_words(meta, "hosts", MAX_HOSTS),
        modes=_modes(meta),
        chapters=chapters,
        relpath=relpath,
        size=len(data),
        body_start=body_start,
        sha256=sha256,
    )


def load_front_matter(yaml_text: str) -> dict[str, Any]:
    # Imported only when a file is parsed: a start whose runbooks are all cached never pays for it (~30 ms).
    import yaml  # type: ignore[import-untyped]  # no stubs installed (types-PyYAML)

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~10 times faster
    try:
        anchored = _uses_anchors(yaml, yaml_text, loader)
        meta = None if anchored else yaml.load(yaml_text, Loader=loader)  # safe: plain data, never Python objects
    except Exception as exc:  # YAMLError, and RecursionError for absurd nesting
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RunbookProblem(f"front matter: not valid YAML ({first_line[:200]})") from None
    if anchored:
        raise RunbookProblem(
            "front matter: YAML anchors and aliases (&name, *name) are not allowed; write each value out"
        )
    if meta is None:
        return {}
    if not isinstance(meta, dict):
        raise RunbookProblem(f"front matter: must be a mapping of fields (got {type(meta).__name__})")
    return meta


def _uses_anchors(yaml: Any, yaml_text: str, loader: Any) -> bool:
    """Whether the YAML defines an anchor or uses an alias. Aliases make a few hundred bytes expand into gigabytes
    (a "billion laughs": each level repeats the one before), and front matter has no use for them. Checked on the
    parser's events, before anything is built: the events are as long as the text, whatever the aliases would
    expand to. Text without `&` or `*` has neither, and skips the extra pass."""
    if "&" not in yaml_text and "*" not in yaml_text:
        return False
    for event in yaml.parse(yaml_text, Loader=loader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            return True
    return False


def chapters_of(body: str) -> tuple[str, ...]:
    """The Markdown headings of the body (ATX `#` headings outside fenced code), in order."""
    chapters: list[str] = []
    fence: str | None = None
    for line in body.splitlines():
        opened = FENCE.match(line)
        if opened is not None:
            marker = opened.group(1)
            fence = None if fence == marker else (fence or marker)
            continue
        if fence is not None:
            continue
        heading = HEADING.match(line)
        if heading is not None:
            chapters.append(heading.group(1).strip()[:MAX_CHAPTER_CHARS])
            if len(chapters) == MAX_CHAPTERS:
                break
    return tuple(chapters)


def first_sentence(body: str) -> str:
    """The first sentence of the body's first paragraph of prose (headings, code and tables skipped)."""
    words: list[str] = []
    fence: str | None = None
    for line in body.splitlines():
        stripped = line.strip()
        opened = FENCE.match(line)
        if opened is not None:
            marker = opened.group(1)
            fence = None if fence == marker else (fence or marker)
            if words:
                break
            continue
        if fence is not None:
            continue
        if not stripped or stripped.startswith(("#", "|", "<!--", "---")):
            if words:
                break
            continue
        words.append(stripped.lstrip("-*+> ").strip())
        if sum(len(word) for word in words) > 2000:
            break
    paragraph = " ".join(" ".join(words).split())
    end = SENTENCE_END.search(paragraph)
    sentence = paragraph[: end.end()] if end else paragraph
    if len(sentence) > SUMMARY_FROM_BODY:
        sentence = sentence[:SUMMARY_FROM_BODY].rsplit(" ", 1)[0] + "…"
    return sentence


def _text(meta: dict[str, Any], field: str, default: str, limit: int) -> str:
    value = meta.get(field, default)
    if not isinstance(value, str) or not value.strip():
        raise RunbookProblem(f"{field}: must be a non-empty string (got {_type_name(value)})")
    value = " ".join(value.split())
    if len(value) > limit:
        raise RunbookProblem(f"{field}: {len(value)} characters is too long; allowed: at most {limit}")
    return value


def _priority(meta: dict[str, Any]) -> int:
    value = meta.get("priority", DEFAULT_PRIORITY)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= ALWAYS_INCLUDED:
        raise RunbookProblem(
            f"priority: {_shown(value)} is not allowed; allowed: an integer from 1 to 10 "
            f"(10 = always included, default {DEFAULT_PRIORITY})"
        )
    return value


def _words(meta: dict[str, Any], field: str, limit: int) -> tuple[str, ...]:
    """Tags and hosts: a list of strings (numbers are taken as written) or one comma-separated string."""
    value = meta.get(field, [])
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",") if item.strip()]
    if not isinstance(value, list):
        raise RunbookProblem(f"{field}: must be a list of strings (got {_type_name(value)})")
    if len(value) > limit:
        raise RunbookProblem(f"{field}: {len(value)} entries is too many; allowed: at most {limit}")
    words = []
    for index, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, str | int | float) or not str(item).strip():
            raise RunbookProblem(f"{field}[{index}]: must be a non-empty string (got {_type_name(item)})")
        word = str(item).strip()
        if len(word) > MAX_TAG_CHARS:
            raise RunbookProblem(
                f"{field}[{index}]: {len(word)} characters is too long; allowed: at most {MAX_TAG_CHARS}"
            )
        words.append(word)
    return tuple(dict.fromkeys(words))


def _arguments(meta: dict[str, Any]) -> tuple[RunbookArgument, ...]:
    value = meta.get("arguments", [])
    if not isinstance(value, list):
        raise RunbookProblem(f"arguments: must be a list of {{name, description, required}} (got {_type_name(value)})")
    if len(value) > MAX_ARGUMENTS:
        raise RunbookProblem(f"arguments: {len(value)} is too many; allowed: at most {MAX_ARGUMENTS}")
    arguments: list[RunbookArgument] = []
    for index, item in enumerate(value):
        where = f"arguments[{index}]"
        if not isinstance(item, dict):
            raise RunbookProblem(
                f"{where}: must be a mapping with name, description, required (got {_type_name(item)})"
            )
        unknown = [key for key in item if key not in ("name", "description", "required")]
        if unknown:
            raise RunbookProblem(f"{where}: unknown field {_shown(unknown[0])}; allowed: name, description, required")
        name = item.get("name")
        if not isinstance(name, str) or not ARGUMENT_PATTERN.match(name):
            raise RunbookProblem(
                f"{where}.name: {_shown(name)} is not allowed; allowed: a-z 0-9 _ starting with a letter"
            )
        if any(argument.name == name for argument in arguments):
            raise RunbookProblem(f"{where}.name: {name!r} is defined twice")
        description = item.get("description", "")
        if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
            raise RunbookProblem(f"{where}.description: must be a string of at most {MAX_DESCRIPTION} characters")
        required = item.get("required", False)
        if not isinstance(required, bool):
            raise RunbookProblem(f"{where}.required: must be true or false (got {_type_name(required)})")
        arguments.append(RunbookArgument(name, " ".join(description.split()), required))
    return tuple(arguments)


def _modes(meta: dict[str, Any]) -> tuple[str, ...]:
    value = meta.get("modes", list(MODES))
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",")]
    if not isinstance(value, list) or not value or any(mode not in MODES for mode in value):
        raise RunbookProblem(f"modes: {_shown(value)} is not allowed; allowed: a non-empty list of {', '.join(MODES)}")
    return tuple(mode for mode in MODES if mode in value)


def _type_name(value: Any) -> str:
    names = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list", dict: "mapping"}
    return "nothing" if value is None else names.get(type(value), type(value).__name__)


def _bounded_repr() -> reprlib.Repr:
    shown = reprlib.Repr()  # Python 3.11's Repr takes no arguments: set its limits one by one
    shown.maxlevel = 2
    shown.maxlist = shown.maxtuple = shown.maxset = shown.maxfrozenset = shown.maxdict = 8
    shown.maxstring = shown.maxother = shown.maxlong = 80
    return shown


BOUNDED_REPR = _bounded_repr()


def _shown(value: Any) -> str:
    """A value as a message quotes it, cut short: bounded in depth, items and characters, so quoting a value
    never costs more than the message it goes into (str() of a large structure would build all of it first)."""
    return BOUNDED_REPR.repr(value)[:120]
