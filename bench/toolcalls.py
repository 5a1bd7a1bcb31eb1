"""Tool calls of the embedded model: tether's constrained steps against plain "auto" tool calling.

Runs every prompt of ``bench/toolcalls_prompts.json`` (each with its expected tool and
arguments) through the embedded model twice, as a first step of an agent with eleven tools:

- ``tether``: ``LocalModel``'s constrained step (the reply must be one call of one of the
  tools, ``finish_task`` included, decoded under their JSON Schemas), in-process;
- ``raw``: the same model behind llama.cpp's OpenAI-compatible server, asked with the API's
  native tools and ``tool_choice: auto`` through the ``openai`` SDK, which is what a peer
  framework gets from this model.

A call is *valid* when it names one of the tools and its arguments match that tool's schema;
*correct* when it is also the expected tool with the expected arguments (a calculation is
compared by its value, so ``17% * 2340`` and ``0.17 * 2340`` both count).

The prompts from ``set_thermostat`` on ask for what a tool's parameters mean: an optional
parameter the user asked for (a unit, a detail flag), a value a parameter's description
names (a mode), an optional one nobody mentioned (left out, never the string "None").

Prints one JSON line: prompts, tether_valid, tether_correct, raw_valid, raw_correct,
median_step_s (tether, after the first step), raw_median_step_s, first_step_s,
raw_first_step_s, median_step_ratio and first_step_ratio (tether's over the raw step's, in
the same run; tether's first step with no system prompt saved), first_step_warm_s (the first
step of a new model server that restores the system prompt the first one saved), tether_misses. ``--modes tether`` runs tether's steps only (no ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Literal, cast

import jsonschema

from tether.messages import UserMessage
from tether.models.base import ModelRequest, ModelSettings
from tether.models.local import LocalModel, start_server
from tether.models.weights import DEFAULT_LOCAL_MODEL, KNOWN_MODELS, assemble
from tether.tools import tool
from tether.tools.base import ToolDefinition
from tether.tools.builtin import calculate, current_time, days_until
from tether.tools.builtin.calculator import evaluate

PROMPTS = Path(__file__).with_name("toolcalls_prompts.json")

INSTRUCTIONS = (
    "You are a helpful assistant with tools. Answer the user's request by calling the one "
    "tool that does it, with exactly the arguments it needs."
)


@tool
def get_weather(city: str, unit: str = "celsius") -> str:
    """The current weather in a city.

    Args:
        city: The city's name, e.g. "Berlin".
        unit: "celsius" or "fahrenheit".
    """
    raise NotImplementedError  # never run: the benchmark only looks at the calls


@tool
def convert_currency(amount: float, source: str, target: str) -> str:
    """Convert an amount of money between currencies.

    Args:
        amount: How much money.
        source: The ISO 4217 code of the currency converted from, e.g. "USD".
        target: The ISO 4217 code of the currency converted to, e.g. "EUR".
    """
    raise NotImplementedError


@tool
def search_docs(query: str) -> str:
    """Search the product documentation.

    Args:
        query: What to look for.
    """
    raise NotImplementedError


@tool
def send_email(to: str, subject: str, body: str) -> str:
    """Send an email.

    Args:
        to: The recipient's address.
        subject: The subject line.
        body: The message.
    """
    raise NotImplementedError


@tool
def get_forecast(
    city: str,
    days: int = 3,
    unit: Literal["celsius", "fahrenheit"] = "celsius",
    hourly: bool = False,
) -> str:
    """The weather forecast for a city.

    Args:
        city: The city's name.
        days: How many days ahead, 1 to 10.
        unit: The temperature unit.
        hourly: Give the hour-by-hour detail instead of one line per day.
    """
    raise NotImplementedError


@tool
def set_thermostat(
    room: str, mode: Literal["heat", "cool", "eco", "off"], target: float | None = None
) -> str:
    """Set a room's thermostat.

    Args:
        room: The room, e.g. "kitchen".
        mode: "heat" or "cool" to reach the target, "eco" to save energy while nobody is
            home, "off" to switch it off.
        target: The target temperature in degrees; leave it out to keep the current one.
    """
    raise NotImplementedError


@tool
def list_files(
    path: str,
    pattern: str | None = None,
    recursive: bool = False,
    sort_by: Literal["name", "size", "modified"] = "name",
) -> str:
    """List the files in a directory.

    Args:
        path: The directory.
        pattern: Only names matching this glob, e.g. "*.txt"; leave it out for all files.
        recursive: Also list the files in its subdirectories.
        sort_by: "name", "size" (largest first) or "modified" (most recently changed first).
    """
    raise NotImplementedError


@tool
def book_table(restaurant: str, people: int, time: str, notes: str | None = None) -> str:
    """Book a table at a restaurant for today.

    Args:
        restaurant: The restaurant's name.
        people: How many people.
        time: The time, as HH:MM (24-hour clock).
        notes: Anything the restaurant should know (diets, a high chair); leave it out if
            nothing was said.
    """
    raise NotImplementedError


FINISH = ToolDefinition(
    name="finish_task",
    description="Finish the task with the final answer.",
    input_schema={
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
    },
)
TOOLS = tuple(
    t.definition
    for t in (
        calculate,
        days_until,
        current_time,
        get_weather,
        convert_currency,
        search_docs,
        send_email,
        get_forecast,
        set_thermostat,
        list_files,
        book_table,
    )
)


def _same(expected: Any, got: Any) -> bool:
    if isinstance(expected, str):
        return isinstance(got, str) and got.strip().lower() == expected.lower()
    if isinstance(expected, int | float) and not isinstance(expected, bool):
        return isinstance(got, int | float) and abs(got - expected) <= 1e-6 * max(1, abs(expected))
    return bool(expected == got)


def judge(case: dict[str, Any], name: str | None, arguments: Any) -> tuple[bool, bool]:
    """(valid, correct) for one call."""
    schemas = {t.name: t.input_schema for t in (*TOOLS, FINISH)}
    if name not in schemas or not isinstance(arguments, dict):
        return False, False
    if list(jsonschema.Draft202012Validator(schemas[name]).iter_errors(arguments)):
        return False, False
    # An argument left out takes its default: that is the call the tool runs.
    properties = cast(dict[str, Any], schemas[name].get("properties") or {})
    defaults = {
        key: spec["default"]
        for key, spec in properties.items()
        if isinstance(spec, dict) and "default" in spec
    }
    args: dict[str, Any] = {**defaults, **arguments}
    if name != case["tool"]:
        return True, False
    if "value" in case:
        try:
            return True, _same(case["value"], evaluate(str(args["expression"])))
        except Exception:
            return True, False
    for key, want in case.get("arguments", {}).items():
        if not _same(want, args.get(key)):
            return True, False
    for key, part in case.get("contains", {}).items():
        if part.lower() not in str(args.get(key, "")).lower():
            return True, False
    return True, True


async def tether_mode(model: LocalModel, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for case in cases:
        request = ModelRequest(
            instructions=INSTRUCTIONS,
            messages=(UserMessage(text=case["prompt"]),),
            tools=(*TOOLS, FINISH),
            settings=ModelSettings(temperature=0.0),
            shared_instructions=True,  # the agent's own instructions, as the loop marks them
        )
        t0 = time.perf_counter()
        response = await model.request(request)
        seconds = time.perf_counter() - t0
        call = response.tool_calls[0] if response.tool_calls else None
        valid, correct = judge(
            case,
            call.name if call else None,
            call.arguments if call and not call.parse_error else None,
        )
        results.append({"valid": valid, "correct": correct, "s": seconds, "call": _shown(call)})
    return results


async def raw_mode(url: str, alias: str, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    import openai

    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": t.name,
                "description": t.description,
                "parameters": t.input_schema,
            },
        }
        for t in TOOLS
    ]
    results: list[dict[str, Any]] = []
    async with openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0) as client:
        for case in cases:
            t0 = time.perf_counter()
            reply = await client.chat.completions.create(
                model=alias,
                messages=[
                    {"role": "system", "content": INSTRUCTIONS},
                    {"role": "user", "content": case["prompt"]},
                ],
                tools=tools,
                tool_choice="auto",
                temperature=0.0,
                max_tokens=256,
            )
            seconds = time.perf_counter() - t0
            message = reply.choices[0].message
            name: str | None = None
            arguments: Any = None
            shown: Any = message.content
            for call in message.tool_calls or ():
                if call.type == "function":
                    name = call.function.name
                    shown = {"name": name, "arguments": call.function.arguments}
                    try:
                        arguments = json.loads(call.function.arguments)
                    except json.JSONDecodeError:
                        arguments = None
                    break
            valid, correct = judge(case, name, arguments)
            results.append({"valid": valid, "correct": correct, "s": seconds, "call": shown})
    return results


def _shown(call: Any) -> Any:
    if call is None:
        return None
    return {"name": call.name, "arguments": call.arguments, "parse_error": call.parse_error}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_LOCAL_MODEL, choices=sorted(KNOWN_MODELS))
    parser.add_argument("--limit", type=int, default=None, help="Only the first N prompts.")
    parser.add_argument(
        "--modes", default="tether,raw", help="tether, raw or both (comma-separated)."
    )
    parser.add_argument("--verbose", action="store_true", help="Also print every miss.")
    args = parser.parse_args()
    modes = {m.strip() for m in str(args.modes).split(",") if m.strip()}
    if not modes or modes - {"tether", "raw"}:
        parser.error("--modes takes tether, raw or tether,raw")
    cases: list[dict[str, Any]] = json.loads(PROMPTS.read_text())[: args.limit]
    path = assemble(KNOWN_MODELS[args.model])
    runs: dict[str, list[dict[str, Any]]] = {}
    warm_first: float | None = None
    if "tether" in modes:
        with tempfile.TemporaryDirectory() as prompts:  # cold: no system prompt saved yet
            runs["tether"] = asyncio.run(
                tether_mode(LocalModel(path, context=4096, prompt_cache=prompts), cases)
            )
            warm = LocalModel(path, context=4096, prompt_cache=prompts)  # a new server
            warm_first = asyncio.run(tether_mode(warm, cases[:1]))[0]["s"]
            del warm
    if "raw" in modes:
        server = start_server(path, context=4096, alias=args.model)
        url = str(server.listening_address).rstrip("/") + "/v1"
        runs["raw"] = asyncio.run(raw_mode(url, args.model, cases))
        del server
    misses = [
        {"prompt": case["prompt"], "mode": mode, "call": result["call"]}
        for mode, results in runs.items()
        for case, result in zip(cases, results, strict=True)
        if not result["correct"]
    ]
    report: dict[str, Any] = {"bench": "toolcalls", "model": args.model, "prompts": len(cases)}
    steps: dict[str, tuple[float, float]] = {}  # mode: (median step after the first, first)
    for mode, results in runs.items():
        later = [r["s"] for r in results[1:]] or [results[0]["s"]]
        steps[mode] = (statistics.median(later), results[0]["s"])
        report[f"{mode}_valid"] = sum(r["valid"] for r in results)
        report[f"{mode}_correct"] = sum(r["correct"] for r in results)
    if "tether" in steps:
        report["median_step_s"] = round(steps["tether"][0], 3)
        report["first_step_s"] = round(steps["tether"][1], 3)
    if warm_first is not None:
        report["first_step_warm_s"] = round(warm_first, 3)
    if "raw" in steps:
        report["raw_median_step_s"] = round(steps["raw"][0], 3)
        report["raw_first_step_s"] = round(steps["raw"][1], 3)
    if len(steps) == 2:
        report["median_step_ratio"] = round(steps["tether"][0] / steps["raw"][0], 3)
        report["first_step_ratio"] = round(steps["tether"][1] / steps["raw"][1], 3)
    report["tether_misses"] = sum(m["mode"] == "tether" for m in misses)
    print(json.dumps(report))
    if args.verbose:
        for miss in misses:
            print(json.dumps(miss))


if __name__ == "__main__":
    main()
