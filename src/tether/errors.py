"""tether's one error tree.

Three families are kept apart: mistakes made by the user of the library, failures of a
run, and control signals that are not failures at all::

    TetherError
    ├── UserError                  the library was used wrongly; fix the calling code
    │   ├── ConfigError            an Agent, Limits or tool definition is invalid
    │   │   └── AuditKeyError      the audit key cannot be read or is too weak to use
    │   ├── DuplicateToolError     two tools share one name
    │   ├── UnknownModelError      a model string no provider resolves
    │   │   └── ModelWeightsError  a local model's weights are missing or not the expected file
    │   ├── ModelRequestsBlocked   a real model was called where requests are blocked (tests)
    │   ├── MissingExtraError      an optional dependency is not installed (also an ImportError)
    │   └── InvalidEntry           a key-value entry the store does not accept (also a ValueError)
    ├── RunError                   a run, or the log of one, failed
    │   ├── ModelError             the model request failed (``transient`` says whether to retry)
    │   ├── ToolTimeout            a tool exceeded its timeout
    │   ├── LoopBlocked            a tool blocked the event loop past its timeout
    │   ├── LogError               a stored or streamed event log cannot be trusted
    │   │   ├── EmptyLog           a log file that holds no events at all
    │   │   ├── UnknownEventKind   an event of a kind this version does not know
    │   │   └── BrokenChain        a gap in ``seq`` or a hash that does not match
    │   ├── ReplayDivergence       a replayed run did something other than the recording
    │   └── StoreError             a run store failed or refused (names the store and what to do)
    │       ├── StoreUnavailable   cannot be opened or created (a path, permissions, not a store)
    │       ├── StoreBusy          locked by another process for longer than the store waits
    │       ├── StoreCorrupt       the file is damaged (says how to recover it)
    │       ├── StoreWriteError    an append could not be made durable (disk full, read-only)
    │       ├── StoreConflict      an append does not continue the stored log
    │       ├── RunNotFound        no run with that id is stored
    │       ├── RunExists          a run with that id is stored already, for another goal
    │       ├── LeaseHeld          another live process owns the run
    │       └── StaleLease         a newer lease replaced this one (fencing)
    └── ControlSignal              not failures: they steer the loop
        ├── ModelRetry             raised by a tool: "tell the model this and let it try again"
        └── ApprovalRequired       raised by a tool: the call fails, the model reads why

Errors carry context (run id, tool, event) as attributes and never log on construction.
Their messages say what happened, why, and what to do next.
"""

from __future__ import annotations

__all__ = [
    "ApprovalRequired",
    "AuditKeyError",
    "BrokenChain",
    "ConfigError",
    "ControlSignal",
    "DuplicateToolError",
    "EmptyLog",
    "InvalidEntry",
    "LeaseHeld",
    "LogError",
    "LoopBlocked",
    "MissingExtraError",
    "ModelError",
    "ModelRequestsBlocked",
    "ModelRetry",
    "ModelWeightsError",
    "ReplayDivergence",
    "RunError",
    "RunExists",
    "RunNotFound",
    "StaleLease",
    "StoreBusy",
    "StoreConflict",
    "StoreCorrupt",
    "StoreError",
    "StoreUnavailable",
    "StoreWriteError",
    "TetherError",
    "ToolTimeout",
    "UnknownEventKind",
    "UnknownModelError",
    "UserError",
]


class TetherError(Exception):
    """The base of every error tether raises on purpose."""


# -- mistakes by the user of the library -------------------------------------------------


class UserError(TetherError):
    """The library was used in a way it does not support; the calling code must change."""


class ConfigError(UserError, ValueError):
    """An agent, its limits, a tool or a model setting is invalid."""


class AuditKeyError(ConfigError):
    """The audit key (``tether.auditkey``) cannot be read, is set twice, or is too short.

    The message names where the key was looked for, never the key.
    """


class DuplicateToolError(ConfigError):
    """Two tools were registered under the same name."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"two tools are named {name!r}; tool names must be unique within an agent. "
            "Rename one (`@tool(name=...)`) or drop the duplicate."
        )
        self.name = name


class ModelWeightsError(ConfigError):
    """A local model's weights are missing, incomplete or not the expected file."""


class UnknownModelError(UserError):
    """A model string that no registered provider can resolve."""

    def __init__(self, spec: str, known: list[str]) -> None:
        super().__init__(
            f"no model provider for {spec!r}. Known prefixes: {', '.join(sorted(known))}. "
            "Pass a Model instance or register a provider with `register_model_provider`."
        )
        self.spec = spec
        self.known = known


class ModelRequestsBlocked(UserError):
    """A real model request was attempted while real requests are blocked (as in tests)."""

    def __init__(self, model: str) -> None:
        super().__init__(
            f"real request to model {model!r} blocked: real model requests are disabled here "
            "(tests). Use tether.testing.ScriptedModel/FunctionModel, or opt in with "
            "`tether.testing.allow_model_requests()` / the `real_model` pytest marker."
        )
        self.model = model


class MissingExtraError(UserError, ImportError):
    """An optional dependency is missing; the message names the ``pip install`` to run."""

    def __init__(self, extra: str, package: str) -> None:
        super().__init__(
            f'this feature needs the optional dependency {package!r}: pip install "tether[{extra}]"'
        )
        self.extra = extra
        self.package = package


class InvalidEntry(UserError, ValueError):
    """A key, namespace or value the key-value store does not accept; nothing was stored."""


# -- failures of a run ---------------------------------------------------------------------


class RunError(TetherError):
    """A run, or the event log of one, failed."""

    def __init__(self, message: str, *, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class ModelError(RunError):
    """A model request failed. ``transient`` errors (rate limits, 5xx, timeouts) are retried."""

    def __init__(
        self,
        message: str,
        *,
        transient: bool = False,
        model: str | None = None,
        status_code: int | None = None,
        run_id: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, run_id=run_id)
        self.transient = transient
        self.model = model
        self.status_code = status_code
        self.retry_after = retry_after
        """Seconds the server asked to wait before another try (``Retry-After``), if it did."""


class ToolTimeout(RunError):
    """A tool call did not finish within its timeout."""

    def __init__(self, tool: str, seconds: float, *, run_id: str | None = None) -> None:
        super().__init__(
            f"tool {tool!r} did not finish within {seconds:g}s and was cancelled", run_id=run_id
        )
        self.tool = tool
        self.seconds = seconds


class LoopBlocked(RunError):
    """A tool held the event loop (blocking code in an ``async`` tool) past its timeout."""

    def __init__(self, tool: str, seconds: float, timeout: float, *, run_id: str | None = None):
        super().__init__(
            f"tool {tool!r} blocked the event loop for {seconds:.1f}s (its timeout is "
            f"{timeout:g}s), stalling every run in this process. An async tool must not call "
            "blocking code: make it a plain `def` (tether runs it in a thread) or await an "
            "async API",
            run_id=run_id,
        )
        self.tool = tool
        self.seconds = seconds
        self.timeout = timeout


class LogError(RunError):
    """An event log cannot be trusted: malformed, unknown, out of order or tampered with."""

    def __init__(self, message: str, *, run_id: str | None = None, line: int | None = None) -> None:
        where = f" (line {line})" if line is not None else ""
        super().__init__(message + where, run_id=run_id)
        self.line = line


class EmptyLog(LogError):
    """A log that holds no events (an empty or blank file): no run's log is empty."""

    def __init__(self, source: str | None = None, *, run_id: str | None = None) -> None:
        shown = f"the log {source}" if source else "the log"
        super().__init__(
            f"{shown} holds no events (it is empty or blank), so it is not a run's log and "
            "there is no chain to verify. Check that it is the right file; "
            "`tether export RUN > FILE` writes a stored run's log",
            run_id=run_id,
        )
        self.source = source


class UnknownEventKind(LogError):
    """An event whose ``kind`` this version of tether does not know."""

    def __init__(self, kind: str, *, run_id: str | None = None, line: int | None = None) -> None:
        super().__init__(
            f"unknown event kind {kind!r}: the log was written by a newer or different "
            "program. Upgrade tether to read it; events are never skipped silently",
            run_id=run_id,
            line=line,
        )
        self.kind = kind


class BrokenChain(LogError):
    """A gap in ``seq``, a foreign ``run_id`` or a hash that does not match its event."""

    def __init__(
        self, message: str, *, seq: int, run_id: str | None = None, line: int | None = None
    ) -> None:
        super().__init__(
            f"event log chain broken at seq {seq}: {message}. The log was edited, reordered, "
            "truncated or mixed with another run; restore it from a trusted copy",
            run_id=run_id,
            line=line,
        )
        self.seq = seq


class ReplayDivergence(RunError):
    """A replayed run diverged from its recording; ``index`` is the first difference."""

    def __init__(
        self, message: str, *, index: int, expected: object = None, actual: object = None
    ) -> None:
        super().__init__(message)
        self.index = index
        self.expected = expected
        self.actual = actual


class StoreError(RunError):
    """A run store failed, or refused an operation. The message names the store and what to do."""


class StoreUnavailable(StoreError):
    """The store cannot be opened or created: a bad path, permissions, or not a run store."""


class StoreBusy(StoreError):
    """Another process held the store locked for longer than this one waits."""


class StoreCorrupt(StoreError):
    """The store's file is damaged; the message says which file and how to recover it."""


class StoreWriteError(StoreError):
    """An append could not be made durable (disk full, permissions, a read-only store).

    What the append carried was not stored; what was stored before it is intact.
    """


class StoreConflict(StoreError):
    """An append does not continue the stored log (a gap, or another event at that seq)."""


class RunNotFound(StoreError):
    """No run with that id is stored."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"no run {run_id!r} in the store (see `tether runs`)", run_id=run_id)


class RunExists(StoreError):
    """A run is stored under that id already, and it is not the run that was asked for."""


class LeaseHeld(StoreError):
    """Another owner holds a live lease on the run."""

    def __init__(self, run_id: str, owner: str, expires_at: float) -> None:
        super().__init__(
            f"run {run_id!r} is owned by {owner}, which is alive (its heartbeat renews the "
            "lease); another process is running or resuming it. Wait for it to stop, or stop "
            "it, then resume",
            run_id=run_id,
        )
        self.owner = owner
        self.expires_at = expires_at


class StaleLease(StoreError):
    """An append under a lease that a newer lease has replaced (fencing)."""

    def __init__(self, run_id: str, token: int, current: int) -> None:
        super().__init__(
            f"append to run {run_id!r} refused: lease {token} was replaced by lease {current}. "
            "Another process owns the run now; this one must stop",
            run_id=run_id,
        )
        self.token = token
        self.current = current


# -- control signals -----------------------------------------------------------------------


class ControlSignal(TetherError):
    """Not a failure: a signal a tool raises to steer the loop."""


class ModelRetry(ControlSignal):
    """Raised by a tool to send ``message`` back to the model so it can try again."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ApprovalRequired(ControlSignal):
    """Raised by a tool that will not act without a human's approval.

    The call ends as an error the model reads (``error_type`` ``approval_required``,
    "TOOL needs approval: REASON"); the run does not stop to ask anyone. For a human to
    approve a call before it runs, give the policy a rule (``require_approval``): the run
    then ends ``waiting_for_approval`` and ``resume`` runs the approved call.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
