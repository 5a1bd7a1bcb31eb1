"""Agents declared in TOML files: ``tether run --agent support.toml``, ``tether serve``.

```toml
name = "support"
instructions = "You answer questions about our product."   # or instructions_file = "x.md"
model = "local"                       # a model string (optional: $TETHER_MODEL, the default)
# or what it must do, and tether picks the first available model that does (run_started
# says which and why): [model] native_tools, json_schema_output, min_context, local_only,
# prefer = ["ollama:qwen2.5-coder:7b", "local"]
can_ask_user = true

[limits]                              # any Limits field; phases as [limits.think] tables
max_steps = 12
max_seconds = 120

[[tools]]
builtin = "calculator"                # calculator, clock, files, http, shell, sql
[[tools]]
builtin = "files"
root = "docs"                         # the factory's options; paths relative to this file
trusted = true
[[tools]]
function = "mypackage.tools:lookup"   # a Tool, or a typed function made one with @tool
[[tools]]
pack = "engineering/shell"            # an installed pack's tool set (`tether packs`)
allow = ["ls", "python3"]             # with the factory's options

[[mcp]]                               # an MCP server's tools (pip install "tether[mcp]")
name = "time"
command = ["python", "-m", "mcp_server_time"]   # started over stdio; or url = "http://..."
only = ["get_current_time"]           # optional; also prefix, timeout, env, cwd, headers
# headers = { Authorization = "Bearer ${DOCS_TOKEN}" }   # ${NAME}: from the environment

[output]                              # the result as a JSON Schema (or output_file = "x.json")
type = "object"
properties = { priority = { enum = ["low", "high"] }, summary = { type = "string" } }
required = ["priority", "summary"]

[memory]                              # also [knowledge] and [thinking]: tether.agentsections
database = "memory.db"

[policy]                              # the tables of a policy file (tether.policy.config)
require_approval = [{ tools = ["write_file"] }]
```

Every key is checked: a mistake is a ``ConfigError`` that names the file and the key, and a
value of the wrong kind says what was given and what the key takes (checked against the type
of the option it sets: ``tether._internal.optionkinds``). A
``function`` entry imports and runs Python code, and an ``[[mcp]]`` command starts a
program: an agent file is as trusted as code. An MCP server's tools are listed when the
file is loaded; each call opens the session it needs (see ``McpServer.tools_now``).
"""

from __future__ import annotations

import inspect
import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import orjson

from tether._internal.configfiles import import_ref, read_regular, read_toml
from tether._internal.optionkinds import checked_options, wrong_kind
from tether.agent import Agent
from tether.agentsections import knowledge_section, memory_section, thinking_section
from tether.errors import ConfigError, TetherError
from tether.jsontypes import JsonObject
from tether.limits import Limits, PhaseLimits
from tether.models.select import ModelNeeds
from tether.tools.base import Tool

if TYPE_CHECKING:
    from tether.tools.mcp import McpServer

__all__ = ["BUILTINS", "agent_files_in", "agents_in", "load_agent_file"]

_TOP = frozenset(
    {"name", "instructions", "instructions_file", "model", "can_ask_user", "limits", "tools",
     "mcp", "policy", "output", "output_file", "memory", "knowledge", "thinking"}
)  # fmt: skip
_MCP_KEYS = frozenset(
    {"name", "command", "url", "env", "cwd", "headers", "timeout", "only", "prefix"}
)  # fmt: skip
_PHASES = ("plan", "think", "reflect", "respond")
_PATHS = {"files": ("root",), "shell": ("workspace",), "sql": ("database",)}
_PACK_PATHS = ("root", "workspace", "database")
_MODEL = 'a model string such as "local" or "openai:gpt-4o", or a [model] table'


def _calculator() -> list[Tool]:
    from tether.tools.builtin import calculate

    return [calculate]


def _clock() -> list[Tool]:
    from tether.tools.builtin import current_time, days_until

    return [current_time, days_until]


def _files(**options: Any) -> list[Tool]:
    from tether.tools.builtin import file_tools

    return file_tools(**options)


def _http(**options: Any) -> list[Tool]:
    from tether.tools.builtin import http_tools

    return http_tools(**options)


def _shell(**options: Any) -> list[Tool]:
    from tether.tools.builtin import shell_tool

    return [shell_tool(**options)]


def _sql(**options: Any) -> list[Tool]:
    from tether.tools.builtin import sql_tool

    return [sql_tool(**options)]


def _builtin_options(name: str) -> Callable[..., Any]:
    """The function whose parameters are the options of the built-in tool set ``name``."""
    from tether.tools import builtin

    factories: dict[str, Callable[..., Any]] = {
        "files": builtin.file_tools,
        "http": builtin.http_tools,
        "shell": builtin.shell_tool,
        "sql": builtin.sql_tool,
    }
    return factories.get(name, BUILTINS[name])


BUILTINS: Mapping[str, Callable[..., list[Tool]]] = {
    "calculator": _calculator,
    "clock": _clock,
    "files": _files,
    "http": _http,
    "shell": _shell,
    "sql": _sql,
}
"""The built-in tool sets a file may name, each made by its factory with the table's options."""


def load_agent_file(path: str | Path) -> Agent[Any]:
    """The agent a TOML file declares (see the module's docstring).

    Raises:
        ConfigError: the file is missing, not TOML, or holds an unknown key or a bad value;
            the message names the file and the key.
    """
    file = Path(path)
    data = read_toml(file, "agent file")
    return _agent(data, file)


def agents_in(folder: str | Path) -> list[Agent[Any]]:
    """Every agent declared by a ``*.toml`` file of ``folder``, by file name."""
    return [load_agent_file(f) for f in agent_files_in(folder)]


def agent_files_in(folder: str | Path) -> list[Path]:
    """The ``*.toml`` files of ``folder``, by name (at least one)."""
    found = sorted(Path(folder).glob("*.toml"))
    if not found:
        raise ConfigError(f"no agent files (*.toml) in {folder}")
    return found


def _agent(data: Mapping[str, Any], file: Path) -> Agent[Any]:
    unknown = sorted(set(data) - _TOP)
    if unknown:
        raise ConfigError(f"{file}: unknown keys {unknown} (known: {', '.join(sorted(_TOP))})")
    name = _required(data, "name", file)
    if "instructions" in data and "instructions_file" in data:
        raise ConfigError(f"{file}: give instructions or instructions_file, not both")
    instructions = _string(data, "instructions", file) or ""
    if "instructions_file" in data:
        text_file = file.parent / _required(
            data, "instructions_file", file, 'a path string such as "./instructions.md"'
        )
        raw = _read_beside(text_file, file, "instructions_file")
        try:
            instructions = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError(
                f"{file}: instructions_file: cannot read {text_file}: it is not UTF-8 text"
            ) from None
    can_ask = data.get("can_ask_user", False)
    if not isinstance(can_ask, bool):
        raise wrong_kind(str(file), "can_ask_user", can_ask, "true or false")
    options: dict[str, Any] = {}
    if "policy" in data:
        from tether.policy import RulePolicy
        from tether.policy.config import rules_from_mapping

        table = _table(data["policy"], file, "[policy]")
        options["policy"] = RulePolicy(rules_from_mapping(table, source=f"{file}: [policy]"))
    model: str | ModelNeeds | None
    if isinstance(data.get("model"), dict):  # what the model must do: tether picks one
        model = _built(ModelNeeds, _table(data["model"], file, "[model]"), file, "[model]")
    else:
        model = _string(data, "model", file, _MODEL)
    sections = {
        "memory": memory_section,
        "knowledge": knowledge_section,
        "thinking": thinking_section,
    }
    for key, section in sections.items():
        if key in data:
            options[key] = section(data[key], file, _table, _built)
    output = _output(data, file)
    if output is not None:
        options["output_schema"] = output
    tools = _tools(data.get("tools", []), file)
    tools += _mcp_servers(data.get("mcp", []), file)
    limits = _limits(data.get("limits", {}), file)
    try:
        return Agent(
            name=name,
            instructions=instructions,
            model=model,
            tools=tools,
            limits=limits,
            can_ask_user=can_ask,
            **options,
        )
    except ConfigError as exc:
        raise ConfigError(f"{file}: {exc}") from None


def _output(data: Mapping[str, Any], file: Path) -> JsonObject | None:
    """The output's JSON Schema: an ``[output]`` table, or a JSON file ``output_file``."""
    if "output" in data and "output_file" in data:
        raise ConfigError(f"{file}: give output or output_file, not both")
    if "output" in data:
        return cast(JsonObject, _table(data["output"], file, "[output]"))
    if "output_file" not in data:
        return None
    schema_file = file.parent / _required(
        data, "output_file", file, 'a path string such as "./schema.json"'
    )
    try:
        schema = orjson.loads(_read_beside(schema_file, file, "output_file"))
    except orjson.JSONDecodeError as exc:
        raise ConfigError(
            f"{file}: output_file: cannot read {schema_file} as JSON: {exc}"
        ) from None
    if not isinstance(schema, dict):
        raise ConfigError(f"{file}: output_file: {schema_file} holds no JSON object")
    return cast(JsonObject, schema)


def _read_beside(path: Path, file: Path, key: str) -> bytes:
    """The bytes of the regular file ``path`` that ``key`` names (``read_regular``)."""
    try:
        return read_regular(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{file}: {key}: cannot read {path}: {exc}") from None


def _string(
    data: Mapping[str, Any], key: str, file: Path, expected: str = "a non-empty string"
) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    return _required(data, key, file, expected)


def _required(
    data: Mapping[str, Any], key: str, file: Path, expected: str = "a non-empty string"
) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise wrong_kind(str(file), key, value, expected)
    return value


def _table(value: object, file: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise wrong_kind(str(file), where, value, "a table")
    return cast(dict[str, Any], value)


def _limits(value: object, file: Path) -> Limits:
    table = dict(_table(value, file, "[limits]"))
    for phase in _PHASES:
        if phase in table:
            sub = _table(table[phase], file, f"[limits.{phase}]")
            table[phase] = _built(PhaseLimits, sub, file, f"[limits.{phase}]")
    return _built(Limits, table, file, "[limits]")


def _built(
    kind: Callable[..., Any],
    table: Mapping[str, Any],
    file: Path,
    where: str,
    *,
    options_of: Callable[..., Any] | None = None,
    paths: tuple[str, ...] = (),
) -> Any:
    """``kind`` called with a table's options, each checked against its parameters' types.

    ``options_of`` is the function whose parameters the options are, when ``kind`` wraps it.
    """
    table = checked_options(kind, table, f"{file}: {where}", options_of=options_of, paths=paths)
    try:
        return kind(**table)
    except ConfigError as exc:
        raise ConfigError(f"{file}: {where}: {exc}") from None
    except Exception as exc:  # a value of the wrong shape deep in a factory's options
        raise ConfigError(f"{file}: {where}: {type(exc).__name__}: {exc}") from None


def _tools(value: object, file: Path) -> list[Tool]:
    if not isinstance(value, list):
        raise wrong_kind(str(file), "tools", value, "an array of [[tools]] tables")
    tools: list[Tool] = []
    for index, entry in enumerate(cast(list[object], value), start=1):
        where = f"[[tools]] #{index}"
        table = dict(_table(entry, file, where))
        if sum(k in table for k in ("builtin", "function", "pack")) != 1:
            raise ConfigError(
                f"{file}: {where}: give builtin = NAME, function = 'module:name' "
                "or pack = 'PACK/TOOLS'"
            )
        if "pack" in table:
            tools.extend(_from_pack(table, file, where))
            continue
        if "function" in table:
            ref = table.pop("function")
            if table:
                raise ConfigError(f"{file}: {where}: unknown keys {sorted(table)} beside function")
            tools.append(_function(ref, file, where))
            continue
        name = table.pop("builtin")
        if not isinstance(name, str):
            raise wrong_kind(f"{file}: {where}", "builtin", name, _one_of(BUILTINS))
        factory = BUILTINS.get(name)
        if factory is None:
            raise ConfigError(f"{file}: {where}: builtin {name!r} is not {_one_of(BUILTINS)}")
        paths = _PATHS.get(name, ())
        for key in paths:
            _relative(table, key, file)
        made = _built(
            factory,
            table,
            file,
            f"{where} ({name})",
            options_of=_builtin_options(name),
            paths=paths,
        )
        tools.extend(_made_tools(made, file, where))
    return tools


def _made_tools(made: object, file: Path, where: str) -> list[Tool]:
    """What a tool set's factory made, checked: a list of tools (a pack's may make anything)."""
    kind = type(made).__name__
    items = cast(list[object], made) if isinstance(made, list | tuple) else None
    wrong = (
        kind
        if items is None
        else next((type(t).__name__ for t in items if not isinstance(t, Tool)), None)
    )
    if items is not None and wrong is None:
        return cast(list[Tool], list(items))
    raise ConfigError(
        f"{file}: {where}: its factory made {'a list holding ' if items is not None else ''}"
        f"{wrong!r}, not a list of tools: the tool set is broken (tell whoever provides it)"
    )


def _from_pack(table: dict[str, Any], file: Path, where: str) -> list[Tool]:
    from tether.packs import pack_tools

    ref = table.pop("pack")
    if not isinstance(ref, str):
        raise wrong_kind(f"{file}: {where}", "pack", ref, 'a string such as "engineering/shell"')
    try:
        factory = pack_tools(ref)
    except ConfigError as exc:
        raise ConfigError(f"{file}: {where}: {exc}") from None
    accepts = inspect.signature(factory).parameters
    for key in _PACK_PATHS:  # paths relative to the file, as builtins'
        if key in accepts and key != "database" and key not in table:
            table[key] = str(file.parent.resolve())  # not the directory a command runs in
        _relative(table, key, file)
    where = f"{where} ({ref})"
    return _made_tools(_built(factory, table, file, where, paths=_PACK_PATHS), file, where)


def _relative(table: dict[str, Any], key: str, file: Path) -> None:
    """``table[key]``, a path or named paths, made relative to the agent file's folder."""
    given = table.get(key)
    if isinstance(given, str) and "://" not in given:  # a file, not a database URL
        table[key] = str((file.parent / given).resolve())
    elif isinstance(given, dict):  # named roots
        table[key] = {
            k: str((file.parent / v).resolve()) if isinstance(v, str) else v
            for k, v in cast(dict[str, object], given).items()
        }


def _mcp_servers(value: object, file: Path) -> list[Tool]:
    if not isinstance(value, list):
        raise wrong_kind(str(file), "mcp", value, "an array of [[mcp]] tables")
    tools: list[Tool] = []
    for index, entry in enumerate(cast(list[object], value), start=1):
        table = _table(entry, file, f"[[mcp]] #{index}")
        where = f"[[mcp]] #{index} ({table.get('name', '?')})"
        try:
            tools += _mcp_server(table, file)
        except ImportError:
            raise ConfigError(
                f'{file}: {where}: MCP servers need their extra: pip install "tether[mcp]"'
            ) from None
        except TetherError as exc:  # a bad key, or a server that did not list its tools
            raise ConfigError(f"{file}: {where}: {exc}") from None
    return tools


def _mcp_server(table: Mapping[str, Any], file: Path) -> list[Tool]:
    from tether.tools.mcp import McpServer

    unknown = sorted(set(table) - _MCP_KEYS)
    if unknown:
        raise ConfigError(f"unknown keys {unknown} (known: {', '.join(sorted(_MCP_KEYS))})")
    if ("command" in table) == ("url" in table):
        raise ConfigError("give command = [program, args...] (stdio) or url = '...' (HTTP)")
    name, timeout = table.get("name"), table.get("timeout", 60.0)
    if not isinstance(name, str):
        raise wrong_kind("", "name", name, 'a string such as "time"')
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise wrong_kind("", "timeout", timeout, "a positive number of seconds such as 60")
    only = table.get("only")
    if only is not None and not _strings(only):
        raise wrong_kind("", "only", only, 'an array of tool names such as ["get_time"]')
    prefix = table.get("prefix", "")
    if not isinstance(prefix, str):
        raise wrong_kind("", "prefix", prefix, 'a string such as "time_"')
    if "url" in table:
        url = table["url"]
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise wrong_kind("", "url", url, 'an http(s) URL such as "http://127.0.0.1:8000/mcp"')
        if {"env", "cwd"} & set(table):
            raise ConfigError("env and cwd are for a server started with command, not url")
        headers = _expanded(table.get("headers", {}), "headers")
        server = McpServer.http(name, url, headers=headers, timeout=float(timeout))
    else:
        server = _stdio_server(name, table, file, float(timeout))
    return server.tools_now(prefix=prefix, only=cast(list[str] | None, only))


def _stdio_server(name: str, table: Mapping[str, Any], file: Path, timeout: float) -> McpServer:
    from mcp.client.stdio import get_default_environment  # HOME, PATH, ...: not the secrets

    from tether.tools.mcp import McpServer

    command = table["command"]
    if not _strings(command) or not command:
        raise wrong_kind("", "command", command, 'an array of strings such as ["python", "x.py"]')
    if "headers" in table:
        raise ConfigError("headers are for a server reached by url, not command")
    env = _expanded(table["env"], "env") if "env" in table else None
    cwd = table.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise wrong_kind("", "cwd", cwd, 'a path string such as "./server"')
    program, *args = cast(list[str], command)
    if "/" in program and not Path(program).is_absolute():  # ./server.py: beside the file
        program = str((file.parent / program).resolve())
    return McpServer.stdio(
        name,
        program,
        *args,
        env=None if env is None else {**get_default_environment(), **env},
        cwd=None if cwd is None else str((file.parent / cwd).resolve()),
        timeout=timeout,
    )


def _one_of(names: Mapping[str, object]) -> str:
    return f"one of {', '.join(sorted(names))}"


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in cast(list[object], value))


def _expanded(value: object, key: str) -> dict[str, str]:
    """A table of strings, each ``${NAME}`` in them replaced by that environment variable."""
    if not isinstance(value, dict) or not all(
        isinstance(v, str) for v in cast(dict[str, object], value).values()
    ):
        expected = 'a table of strings such as { NAME = "value" }'
        raise wrong_kind(
            "", key, cast(object, value), expected, show=False
        )  # its values may be secrets

    def variable(match: re.Match[str]) -> str:
        found = os.environ.get(match.group(1))
        if found is None:
            raise ConfigError(f"{key}: the environment variable {match.group(1)} is not set")
        return found

    return {k: _VARIABLE.sub(variable, v) for k, v in cast(dict[str, str], value).items()}


_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _function(ref: object, file: Path, where: str) -> Tool:
    from tether.tools.function import function_tool

    if not isinstance(ref, str):
        raise wrong_kind(f"{file}: {where}", "function", ref, 'a string such as "tools:lookup"')
    try:
        value = import_ref(ref, "function", beside=file.parent)
    except ConfigError as exc:
        raise ConfigError(f"{file}: {where}: {exc}") from None
    if isinstance(value, Tool):
        return value
    if callable(value) and not isinstance(value, type):
        try:
            return function_tool(value)
        except ConfigError as exc:
            raise ConfigError(f"{file}: {where}: {exc}") from None
    raise ConfigError(f"{file}: {where}: {ref!r} is a {type(value).__name__}, not a tool")
