"""How well the retrieval grader tells an answerable question from an unanswerable one.

``bench/rag.py`` refuses unanswerable questions only where the grader (the embedded 1.5B
model, ``Retriever``'s constrained ``verdict``) calls no passage relevant. This check asks
whether any threshold on the grader could do better: each question of Disfl-QA (SQuAD 2.0:
the unanswerable ones were written against the very paragraph, with a name, a date or a
negation changed) is graded against its own paragraph with the grader's own request, and
the verdict is read three ways: ``relevant`` as it says, the ``confidence`` it writes, and the
probability llama.cpp gives ``true`` at the ``relevant`` key (the reply up to it, the model's
own evidence included, prefilled; ``top_logprobs``). The sample is drawn with a seed of its
own (``--seed``, default 1001; ``bench/rag.py`` uses 7), so a threshold read off it is not
tuned on the other's questions.

One JSON line: ``questions``, ``said_relevant_answerable`` and
``said_relevant_unanswerable`` (percent), the AUROC of each reading (answerable above
unanswerable: 50 is chance, 100 perfect), and for the probability the share of answerable
questions kept at the strictest threshold that refuses at least 80% of the unanswerable ones
(issue 14's refusal target).

    python bench/rag_grader.py --questions 40
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from qadata import disfl_qa

from tether.knowledge.retrieval import _GRADE, _VERDICT  # the grader's own request
from tether.messages import UserMessage
from tether.models.base import ModelRequest, ModelSettings
from tether.models.local import LocalModel, local_body
from tether.thinking.model import call_arguments

PASSAGE_CHARS = 1500  # as Retriever's default


def p_true(model: LocalModel, request: ModelRequest, evidence: str) -> float | None:
    """P(``true``) at the verdict's ``relevant`` key, after the model's own evidence."""
    server: Any = model._load()  # pyright: ignore[reportPrivateUsage] - its llama.cpp server
    body = local_body(request)
    prefill = (
        '{"tool":"verdict","arguments":{"evidence":'
        + json.dumps(evidence, ensure_ascii=False, separators=(",", ":"))
        + ',"relevant":'
    )
    probe = {k: v for k, v in body.items() if k not in ("grammar", "stop")}
    probe["messages"] = [*body["messages"][:-1], {"role": "assistant", "content": prefill}]
    probe.update(max_tokens=1, logprobs=True, top_logprobs=20, temperature=0)
    reply = server.handle_chat_completions(probe)
    content = (reply["choices"][0].get("logprobs") or {}).get("content") or []
    top = content[0]["top_logprobs"] if content else []
    yes = sum(math.exp(t["logprob"]) for t in top if t["token"].strip().lower() == "true")
    no = sum(math.exp(t["logprob"]) for t in top if t["token"].strip().lower() == "false")
    return yes / (yes + no) if yes + no > 0 else None


def auroc(positive: list[float], negative: list[float]) -> float | None:
    """The chance that a random positive scores above a random negative (ties: half)."""
    pairs = [(p > n) + 0.5 * (p == n) for p in positive for n in negative]
    return None if not pairs else round(100 * sum(pairs) / len(pairs), 1)


async def main(questions: int, seed: int, verbose: bool) -> None:
    data = disfl_qa()
    rng = random.Random(seed)
    answerable = [e for e in data if e["answer"] != "unknown"]
    unanswerable = [e for e in data if e["answer"] == "unknown"]
    sample = rng.sample(answerable, questions) + rng.sample(unanswerable, questions)
    model = LocalModel()
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for example in sample:
        question, passage = example["question"], example["context"][:PASSAGE_CHARS]
        request = ModelRequest(
            instructions=_GRADE,
            messages=(UserMessage(text=f"Question: {question}\n\nPassage:\n{passage}"),),
            tools=(_VERDICT,),
            tool_choice="required",
            settings=ModelSettings(max_output_tokens=160, temperature=0.0),
        )
        verdict = call_arguments(await model.request(request), "verdict") or {}
        evidence = verdict.get("evidence")
        confidence = verdict.get("confidence")
        row = {
            "answerable": example["answer"] != "unknown",
            "relevant": verdict.get("relevant") is True,
            "confidence": float(confidence) if isinstance(confidence, int | float) else 0.0,
            "p_true": p_true(model, request, evidence if isinstance(evidence, str) else ""),
        }
        rows.append(row)
        if verbose:
            print(json.dumps({"q": question, **row}), file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0

    def scores(key: str, want: bool) -> list[float]:
        return [float(r[key] or 0.0) for r in rows if r["answerable"] is want]

    def said(want: bool) -> float:
        mine = [r for r in rows if r["answerable"] is want]
        return round(100 * sum(r["relevant"] for r in mine) / max(1, len(mine)), 1)

    negative = sorted(scores("p_true", False))
    # the lowest threshold at which at least 80% of the unanswerable score below it
    threshold = negative[math.ceil(0.8 * len(negative)) - 1] if negative else 1.0
    kept = [s for s in scores("p_true", True) if s > threshold]
    print(
        json.dumps(
            {
                "bench": "rag_grader",
                "model": model.name,
                "questions": len(rows),
                "said_relevant_answerable": said(True),
                "said_relevant_unanswerable": said(False),
                "auroc_relevant": auroc(scores("relevant", True), scores("relevant", False)),
                "auroc_confidence": auroc(scores("confidence", True), scores("confidence", False)),
                "auroc_p_true": auroc(scores("p_true", True), scores("p_true", False)),
                "p_true_threshold_refusing_80": round(threshold, 4),
                "answerable_kept_at_it": round(100 * len(kept) / max(1, questions), 1),
                "s_per_question": round(seconds / max(1, len(rows)), 1),
                "seed": seed,
            }
        )
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--questions", type=int, default=40, help="of each kind")
    parser.add_argument("--seed", type=int, default=1001)
    parser.add_argument("-v", "--verbose", action="store_true", help="each question on stderr")
    args = parser.parse_args()
    asyncio.run(main(args.questions, args.seed, args.verbose))
