"""Building an MCP tool from a thin function: schema from what a client passes (its signature, less what the call
router passes in), a clean description, annotations.

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
from typing import Any, Unpack, get_args, get_origin, get_type_hints

import orjson
import pydantic
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities import func_metadata as sdk_func_metadata
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata, func_metadata
from mcp_types import ToolAnnotations
from pydantic import PrivateAttr

import relay_shell

PACKAGE_DIR = Path(relay_shell.__file__).parent

# The parameters a tool function gets from the call router (surface/router.py), not from the client.
INJECTED = ("call", "services")


def make_tool(
    function: Callable[..., Any], title: str, *, read_only: bool, destructive: bool, idempotent: bool, open_world: bool
) -> Tool:
    function.__signature__ = client_signature(function)  # type: ignore[attr-defined]  # see client_signature
    schemas = SCHEMA_CACHE.tools().get(function.__name__)
    metadata = LazyArguments.of(function)
    if schemas is None:
        schemas = {
            "parameters": metadata.model().model_json_schema(by_alias=True),
            # From the result model in the return annotation; several tools share a model (six return
            # SessionResult), so each model's schema is generated once.
            "output": output_schema(_evaluated(function.__annotations__["return"], function)),
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
        context_kwarg=None,  # the router passes `call` and `services` itself
        annotations=ToolAnnotations(
            title=title,
            read_only_hint=read_only,
            destructive_hint=destructive,
            idempotent_hint=idempotent,
            open_world_hint=open_world,
        ),
    )


def client_signature(function: Callable[..., Any]) -> inspect.Signature:
    """What a client passes to a tool: the function's parameters without those the call router injects
    (INJECTED), and with `**connection: Unpack[SshConnection]` spelled out as the keyword arguments it stands for,
    each optional (None), in the TypedDict's order. The SDK builds the argument model (and its own inputSchema) from
    a function's signature and knows no Unpack, so this becomes the tool function's `__signature__`: whoever
    inspects a tool sees what a client may send. Parameter annotations are evaluated (the SDK needs them so); the
    return annotation stays as written, since evaluating it loads the result models (results.py)."""
    written = inspect.signature(function)
    parameters = []
    for parameter in written.parameters.values():
        if parameter.name in INJECTED:
            continue
        annotation = _evaluated(parameter.annotation, function)
        if parameter.kind is inspect.Parameter.VAR_KEYWORD and get_origin(annotation) is Unpack:
            fields = get_type_hints(get_args(annotation)[0], include_extras=True)
            keyword = inspect.Parameter.KEYWORD_ONLY
            parameters += [
                inspect.Parameter(name, keyword, default=None, annotation=hint) for name, hint in fields.items()
            ]
            continue
        parameters.append(parameter.replace(annotation=annotation))
    return inspect.Signature(parameters, return_annotation=written.return_annotation)


def _evaluated(annotation: Any, function: Callable[..., Any]) -> Any:
    """An annotation as inspect.signature(eval_str=True) gives it (the modules use postponed annotations: `from
    __future__ import annotations`), one at a time."""
    if not isinstance(annotation, str):
        return annotation
    return eval(annotation, function.__globals__)  # what inspect does with eval_str=True, for one annotation


class LazyArguments(FuncMetadata):
    """The SDK's FuncMetadata whose argument model (a pydantic model per tool, ~1 ms each) is built on the tool's
    first call: a start with cached schemas needs none of them."""

    _function: Any = PrivateAttr(default=None)

    @classmethod
    def of(cls, function: Callable[..., Any]) -> LazyArguments:
        metadata = cls.model_construct(arg_model=None, output_schema=None)  # type: ignore[arg-type]  # see model()
        metadata._function = function
        return metadata

    def model(self) -> type[ArgModelBase]:
        if self.arg_model is None:
            # From the client's signature (client_signature); the output schema is the registry's business.
            self.arg_model = func_metadata(self._function, structured_output=False).arg_model
        return self.arg_model

    def validate_arguments(self, arguments_to_validate: dict[str, Any]) -> dict[str, Any]:
        self.model()
        return super().validate_arguments(arguments_to_validate)

    def pre_parse_json(self, data: dict[str, Any]) -> dict[str, Any]:
        """The SDK's pre-parse (a list or object sent as a JSON string becomes that list or object), skipped
        when no value can be one: it tries json.loads on every string of a non-str argument (a regex in
        `until`, a path, a command), and a failed parse raises, which costs more than the rest of the validation.
        Only a text starting with `[`, `{` or `n` after JSON whitespace parses to something it keeps (a list, an
        object, null): `true` and `false` parse to booleans, which it leaves as the strings they were (a bool is
        an int), as it does numbers."""
        if any(isinstance(value, str) and value.lstrip(" \t\n\r")[:1] in _JSON_KEPT_STARTS for value in data.values()):
            return super().pre_parse_json(data)
        return data.copy()


_JSON_KEPT_STARTS = ("[", "{", "n")  # not "": "" in "abc" is true


@functools.cache
def output_schema(return_annotation: Any) -> dict[str, Any] | None:
    """The schema the SDK derives for a function with this return annotation (structured output)."""

    def probe() -> None: ...

    probe.__annotations__["return"] = return_annotation
    return func_metadata(probe, structured_output=True).output_schema


class SchemaCache:
    """The schemas by tool name. In the file each distinct outputSchema is kept once (six tools return
    SessionResult), and the tools refer to it: loaded, the tools sharing a result model share its schema."""

    def __init__(self) -> None:
        self.loaded: dict[str, Any] | None = None
        self.key = ""
        self.changed = False

    def tools(self) -> dict[str, Any]:
        if self.loaded is None:
            self.key = cache_key()
            self.loaded = {}
            with contextlib.suppress(OSError, orjson.JSONDecodeError, TypeError, KeyError, IndexError):
                stored = orjson.loads(cache_path().read_bytes())
                if stored["key"] == self.key:
                    outputs = stored["outputs"]
                    self.loaded = {
                        name: {"parameters": entry["parameters"], "output": _output(outputs, entry["output"])}
                        for name, entry in stored["tools"].items()
                    }
        return self.loaded

    def store(self, name: str, schemas: dict[str, Any]) -> None:
        self.tools()[name] = schemas
        self.changed = True

    def save(self) -> None:
        """Write the schemas built this start, if any; a cache that cannot be written is only slower."""
        if not self.changed or self.loaded is None:
            return
        self.changed = False
        numbers: dict[bytes, int] = {}  # each distinct outputSchema (as JSON) -> its place in `outputs`
        outputs: list[Any] = []
        tools = {}
        for name, schemas in self.loaded.items():
            output = schemas["output"]
            number = None
            if output is not None:
                serialized = orjson.dumps(output)
                if serialized not in numbers:
                    numbers[serialized] = len(outputs)
                    outputs.append(output)
                number = numbers[serialized]
            tools[name] = {"parameters": schemas["parameters"], "output": number}
        stored = {"key": self.key, "outputs": outputs, "tools": tools}
        path = cache_path()
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        with contextlib.suppress(OSError):
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(orjson.dumps(stored))
            os.replace(temporary, path)
        with contextlib.suppress(OSError):
            temporary.unlink()


def _output(outputs: list[Any], number: int | None) -> Any:
    return None if number is None else outputs[number]


SCHEMA_CACHE = SchemaCache()


def cache_path() -> Path:
    cache_home = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache_home) / "relay-shell" / "tool-schemas.json"


def cache_key() -> str:
    """Every package file's path, size and modification time, and the versions that shape a schema."""
    digest = hashlib.sha256(f"{relay_shell.__version__}|{pydantic.VERSION}".encode())
    files = []
    for directory, subdirectories, names in os.walk(PACKAGE_DIR):
        subdirectories[:] = [name for name in subdirectories if name != "__pycache__"]
        files += [os.path.join(directory, name) for name in names if name.endswith(".py")]
    for path in [*sorted(files), sdk_func_metadata.__file__ or ""]:
        with contextlib.suppress(OSError):
            status = os.stat(path)
            digest.update(f"{path}|{status.st_size}|{status.st_mtime_ns}\n".encode())
    return digest.hexdigest()
