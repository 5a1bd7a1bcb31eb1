"""Built-in tools, each a factory of configured, annotated tools (nothing runs unconfigured).

- ``calculate``, ``current_time``, ``days_until``: safe arithmetic and the clock.
- ``file_tools(root)``: read, write, list and search files confined to their roots.
- ``shell_tool(workspace, allow=...)``: argv-only commands from an allowlist, sandboxed
  (off unless built with an explicit allowlist).
- ``http_tools(...)``: GET and POST that refuse private and metadata addresses
  (``tether[http]``).
- ``sql_tool(database)``: parameterized, read-only-by-default queries on SQLite and
  PostgreSQL (``tether[postgres]`` for PostgreSQL).
- ``kv_tools(store)``: a key-value store backed by the run store.
"""

from tether.tools.builtin.calculator import calculate
from tether.tools.builtin.clock import current_time, days_until
from tether.tools.builtin.files import file_tools
from tether.tools.builtin.http import http_tools
from tether.tools.builtin.kv import kv_tools
from tether.tools.builtin.shell import CommandRule, ResourceLimits, shell_tool
from tether.tools.builtin.sql import sql_tool

__all__ = [
    "CommandRule",
    "ResourceLimits",
    "calculate",
    "current_time",
    "days_until",
    "file_tools",
    "http_tools",
    "kv_tools",
    "shell_tool",
    "sql_tool",
]
