"""Building an MCP tool from a thin function: schema from the signature, a clean description, annotations.

Generating the JSON schemas (every tool's inputSchema, every result model's outputSchema) is most of the work
of building the server, and they depend only on the code. So they are kept in a cache file
(`$XDG_CACHE_HOME/relay-shell/tool-schemas.json`, 0600) under a key made of every package file's size and
modification time and the SDK's and pydantic's versions: any change to the code or a dependency builds them
afresh, as Python does with .pyc files. Arguments are always validated by the pydantic model built from the
function itself; the cache only holds what `tools/list` shows.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pydantic
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities import func_metadata as sdk_func_metadata
from mcp.server.mcpserver.utilities.context_injection import find_context_parameter
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata, func_metadata
from mcp_types import ToolAnnotations
from pydantic import PrivateAttr

import relay_shell

PACKAGE_DIR = Path(relay_shell.__file__).parent


def make_tool(
    function: Callable[..., Any], title: str, *, read_only: bool, destructive: bool, idempotent: bool, open_world: bool
) -> Tool:
    # Our tools take their Context as `ctx`; the SDK's search evaluates every type hint (~0.5 ms a tool).
    context_kwarg = "ctx" if "ctx" in inspect.signature(function).parameters else find_context_parameter(function)
    schemas = SCHEMA_CACHE.tools().get(function.__name__)
    metadata = LazyArguments.of(function, [context_kwarg] if context_kwarg else [])
    if schemas is None:
        schemas = {
            "parameters": metadata.model().model_json_schema(by_alias=True),
            # From the result model in the return annotation; several tools share a model (six return
            # SessionResult), so each model's schema is generated once.
            "output": output_schema(inspect.signature(function, eval_str=True).return_annotation),
        }
        SCHEMA_CACHE.store(function.__name__, schemas)
    metadata.output_schema = schemas["output"]
    return Tool(
        fn=function,
        name=function.__name__,
        title=title,
        description=inspect.cleandoc(function.__doc__ or ""),
        parameters=schemas["parameters"],
        fn_metadata=metadata,
        is_async=inspect.iscoroutinefunction(function),
        context_kwarg=context_kwarg,
        annotations=ToolAnnotations(
            title=title,
            read_only_hint=read_only,
            destructive_hint=destructive,
            idempotent_hint=idempotent,
            open_world_hint=open_world,
        ),
    )


class LazyArguments(FuncMetadata):
    """The SDK's FuncMetadata whose argument model (a pydantic model per tool, ~1 ms each) is built on the tool's
    first call: a start with cached schemas needs none of them."""

    _function: Any = PrivateAttr(default=None)
    _skip_names: list[str] = PrivateAttr(default_factory=list)

    @classmethod
    def of(cls, function: Callable[..., Any], skip_names: list[str]) -> LazyArguments:
        metadata = cls.model_construct(arg_model=None, output_schema=None)  # type: ignore[arg-type]  # see model()
        metadata._function = function
        metadata._skip_names = skip_names
        return metadata

    def model(self) -> type[ArgModelBase]:
        if self.arg_model is None:
            self.arg_model = func_metadata(self._function, skip_names=self._skip_names).arg_model
        return self.arg_model

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        self.model()
        return super().validate_arguments(arguments_to_validate)

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        """The SDK's pre-parse (a list or object sent as a JSON string becomes that list or object), skipped
        when no value can be one: it tries json.loads on every string of a non-str argument (a regex in
        `until`, a path), and a failed parse raises, which costs more than the rest of the validation. Only a
        text starting with `[`, `{`, `t`, `f` or `n` after JSON whitespace parses to something it keeps."""
        if any(isinstance(value, str) and value.lstrip(" \t\n\r")[:1] in _JSON_KEPT_STARTS for value in data.values()):
            return super().pre_parse_json(data)
        return data.copy()


_JSON_KEPT_STARTS = ("[", "{", "t", "f", "n")  # not "": "" in "abc" is true


@functools.cache
def output_schema(return_annotation: Any) -> dict[str, Any] | None:
    """The schema the SDK derives for a function with this return annotation (structured output)."""

    def probe() -> None: ...

    probe.__annotations__["return"] = return_annotation
    return func_metadata(probe, structured_output=True).output_schema


class SchemaCache:
    def __init__(self) -> None:
        self.loaded: dict[str, Any] | None = None
        self.key = ""
        self.changed = False

    def tools(self) -> dict[str, Any]:
        if self.loaded is None:
            self.key = cache_key()
            self.loaded = {}
            with contextlib.suppress(OSError, orjson.JSONDecodeError, TypeError, KeyError):
                stored = orjson.loads(cache_path().read_bytes())
                if stored["key"] == self.key and isinstance(stored["tools"], dict):
                    self.loaded = stored["tools"]
        return self.loaded

    def store(self, name: str, schemas: dict[str, Any]) -> None:
        self.tools()[name] = schemas
        self.changed = True

    def save(self) -> None:
        """Write the schemas built this start, if any; a cache that cannot be written is only slower."""
        if not self.changed or self.loaded is None:
            return
        self.changed = False
        path = cache_path()
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        with contextlib.suppress(OSError):
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(orjson.dumps({"key": self.key, "tools": self.loaded}))
            os.replace(temporary, path)
        with contextlib.suppress(OSError):
            temporary.unlink()


SCHEMA_CACHE = SchemaCache()


def cache_path() -> Path:
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "relay-shell" / "tool-schemas.json"


def cache_key() -> str:
    """Every package file's path, size and modification time, and the versions that shape a schema."""
    digest = hashlib.sha256(f"{relay_shell.__version__}|{pydantic.VERSION}".encode())
    sdk_file = Path(sdk_func_metadata.__file__ or "")
    files = [*sorted(PACKAGE_DIR.rglob("*.py")), sdk_file]
    for path in files:
        with contextlib.suppress(OSError):
            status = path.stat()
            digest.update(f"{path}|{status.st_size}|{status.st_mtime_ns}\n".encode())
    return digest.hexdigest()
