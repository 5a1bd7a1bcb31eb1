"""A held-out function-calling check: the embedded model's first step on BFCL prompts.

The Berkeley Function Calling Leaderboard's question and answer files ship inside its
evaluation package on PyPI (``bfcl-eval``, Apache-2.0; read out of the wheel, never
installed: its dependencies are heavy). Nothing in tether was tuned on them. The check takes
the first ``--simple`` prompts of ``simple_python`` (one candidate function each) and the
first ``--multiple`` of ``multiple`` (two to four candidates), gives each prompt's candidates
to ``LocalModel`` as an agent's tools (``finish_task`` beside them, as every agent has), and
judges the one call of its first step with BFCL's own AST checker (its module, loaded from
the wheel; a call is correct when the function and every argument are among the accepted
answers, optional ones left out where allowed). BFCL writes functions as JSON Schema with
Python's type names (``dict``, ``float``, ``tuple``, ``any``); they are mapped to JSON
Schema's, and dots in function names become ``_`` (as BFCL does for OpenAI-style APIs).

Prints one JSON line: prompts, valid (a call of one of the candidates that its schema
admits), correct, by_category, median_step_s, and with ``-v`` every miss (a step that failed
with a ``ModelError`` is one, shown with its message).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import types
import zipfile
from pathlib import Path
from typing import Any

import jsonschema

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/qadata.py, bench/toolcalls.py

from qadata import downloaded
from toolcalls import FINISH, INSTRUCTIONS  # the same agent's words as bench/toolcalls.py

from tether.errors import ModelError
from tether.messages import UserMessage
from tether.models.base import ModelRequest, ModelSettings
from tether.models.local import LocalModel
from tether.tools.base import ToolDefinition

WHEEL = "bfcl_eval-2026.3.23-py3-none-any.whl"
WHEEL_SHA256 = "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


def wheel() -> Path:
    """The bfcl-eval wheel, downloaded once into ``$TETHER_BENCH_DATA`` and checked."""
    return downloaded("bfcl-eval==2026.3.23", WHEEL, WHEEL_SHA256, "1.9 MB")


def cases(archive: Path, category: str, count: int) -> list[dict[str, Any]]:
    """The first ``count`` prompts of a BFCL category, each with its accepted answers."""
    with zipfile.ZipFile(archive) as z:
        questions = z.read(f"bfcl_eval/data/BFCL_v4_{category}.json").decode().splitlines()
        answers = z.read(f"bfcl_eval/data/possible_answer/BFCL_v4_{category}.json").decode()
    by_id = {a["id"]: a["ground_truth"] for a in map(json.loads, answers.splitlines())}
    out: list[dict[str, Any]] = []
    for line in questions[:count]:
        case = json.loads(line)
        case["answer"] = by_id[case["id"]]
        case["category"] = category
        out.append(case)
    return out


def checker(archive: Path) -> Any:
    """BFCL's ``ast_checker``, loaded from the wheel (its model table, which imports every
    provider's SDK, replaced by the one entry it reads: names with dots written with ``_``)."""
    target = archive.with_suffix("")
    if not (target / "bfcl_eval").is_dir():
        with zipfile.ZipFile(archive) as z:
            z.extractall(target)
    sys.path.insert(0, str(target))
    config = types.ModuleType("bfcl_eval.constants.model_config")
    config.MODEL_CONFIG_MAPPING = {"tether": types.SimpleNamespace(underscore_to_dot=True)}  # type: ignore[attr-defined]
    sys.modules["bfcl_eval.constants.model_config"] = config
    from bfcl_eval.constants.enums import Language  # pyright: ignore[reportMissingImports]
    from bfcl_eval.eval_checker.ast_eval.ast_checker import (  # pyright: ignore[reportMissingImports]
        ast_checker,  # pyright: ignore[reportUnknownVariableType]
    )

    python: Any = Language.PYTHON  # pyright: ignore[reportUnknownMemberType]

    def check(functions: Any, output: Any, answer: Any, category: str) -> bool:
        verdict = ast_checker(functions, output, answer, python, category, "tether")
        return bool(verdict["valid"])

    return check


def json_schema(node: Any) -> Any:
    """A BFCL parameter schema in JSON Schema's words."""
    if isinstance(node, list):
        return [json_schema(n) for n in node]  # pyright: ignore[reportUnknownVariableType]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():  # pyright: ignore[reportUnknownVariableType]
        if key == "optional":
            continue
        if key == "type" and value in _TYPES:
            if _TYPES[value] is not None:
                out["type"] = _TYPES[value]
            continue
        if key == "properties":
            out[key] = {k: json_schema(v) for k, v in value.items()}
        else:
            out[key] = json_schema(value)
    return out


def tools_of(case: dict[str, Any]) -> tuple[ToolDefinition, ...]:
    return tuple(
        ToolDefinition(
            name=f["name"].replace(".", "_"),
            description=f["description"],
            input_schema=json_schema(f["parameters"]),
        )
        for f in case["function"]
    )


async def run(
    model: LocalModel, todo: list[dict[str, Any]], ast_checker: Any
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for case in todo:
        tools = tools_of(case)
        request = ModelRequest(
            instructions=INSTRUCTIONS,
            messages=(UserMessage(text=case["question"][0][-1]["content"]),),
            tools=(*tools, FINISH),
            settings=ModelSettings(temperature=0.0),
        )
        t0 = time.perf_counter()
        error = None
        try:
            response = await model.request(request)
            call = response.tool_calls[0] if response.tool_calls else None
        except ModelError as exc:  # a step that failed is a miss, not the end of the check
            call, error = None, str(exc)
        seconds = time.perf_counter() - t0
        schemas = {t.name: t.input_schema for t in tools}
        valid = (
            call is not None
            and call.parse_error is None
            and call.name in schemas
            and not list(
                jsonschema.Draft202012Validator(schemas[call.name]).iter_errors(call.arguments)
            )
        )
        correct = False
        if call is not None and call.name in schemas:
            output = [{call.name: call.arguments}]
            correct = ast_checker(case["function"], output, case["answer"], case["category"])
        shown = error if call is None else {"name": call.name, "arguments": call.arguments}
        results.append(
            {"id": case["id"], "valid": valid, "correct": correct, "s": seconds, "call": shown}
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--simple", type=int, default=50, help="prompts of simple_python")
    parser.add_argument("--multiple", type=int, default=50, help="prompts of multiple")
    parser.add_argument("-v", "--verbose", action="store_true", help="also print every miss")
    args = parser.parse_args()
    archive = wheel()
    ast_checker = checker(archive)
    todo = cases(archive, "simple_python", args.simple) + cases(archive, "multiple", args.multiple)
    results = asyncio.run(run(LocalModel(context=8192, prompt_cache=False), todo, ast_checker))
    by_category: dict[str, str] = {}
    for category in ("simple_python", "multiple"):
        mine = [r for r, c in zip(results, todo, strict=True) if c["category"] == category]
        by_category[category] = f"{sum(r['correct'] for r in mine)}/{len(mine)}"
    report = {
        "bench": "bfcl",
        "prompts": len(results),
        "valid": sum(r["valid"] for r in results),
        "correct": sum(r["correct"] for r in results),
        "by_category": by_category,
        "median_step_s": round(statistics.median(r["s"] for r in results), 2),
    }
    print(json.dumps(report))
    if args.verbose:
        for r, c in zip(results, todo, strict=True):
            if not r["correct"]:
                print(json.dumps({"id": r["id"], "call": r["call"], "answer": c["answer"]}))


if __name__ == "__main__":
    main()
