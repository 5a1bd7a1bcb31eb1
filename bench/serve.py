"""``tether serve`` under load: runs started per second, commit-to-SSE latency, memory a stream.

A real server process on loopback (``python -m tether serve``, SQLite store in a temp
directory, a scripted agent: no model time), driven by an httpx client in this process:

- ``runs_per_s``: ``--runs`` quick runs (one model turn, then finished) started by 16
  concurrent clients, over the wall time of their POSTs;
- ``sse_p50_ms`` / ``sse_p99_ms``: ``--streams`` runs of an agent that calls a tool 8 times
  (each waits 0.25 s, all in step), one SSE stream open on each; the latency of an event is
  when the stream delivered it minus its ``at`` (taken before it is committed, so this
  includes the commit); only events committed once the stream was open (its response had
  begun) count: the rest came as its backlog;
- ``sse_open_p50_ms`` / ``sse_open_p99_ms``: from asking for a stream to its response
  beginning, the 100 asked at once (key check, the run's row, its backlog read);
- ``rss_per_stream_kib``: the server's RSS with ``--streams`` idle streams open (their runs
  wait in a 60-s tool) minus its RSS before they opened, per stream (each idle stream also
  holds its run);
- ``baseline_rtt_p50_ms``: the same machine's loopback round trip to the same server
  (``GET /v1/runs/{id}``), measured in the same run: the scale the latencies sit on.

Prints one JSON line. ``python bench/serve.py [--streams 100] [--runs 200]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import datetime
from pathlib import Path

import httpx
import orjson

AGENTS = textwrap.dedent(
    '''
    import asyncio
    from tether import Agent, tool
    from tether.testing import ScriptedModel, call, finish

    @tool(read_only=True, open_world=False)
    async def pause(seconds: float) -> str:
        """Waits a while."""
        await asyncio.sleep(seconds)
        return "waited"

    quick = Agent(name="quick", model=ScriptedModel([finish("done")]))
    steps = [call("pause", seconds=0.25) for _ in range(8)] + [finish("done")]
    busy = Agent(name="busy", model=ScriptedModel(steps), tools=[pause])
    idle = Agent(
        name="idle", model=ScriptedModel([call("pause", seconds=60.0), finish("done")]),
        tools=[pause],
    )
    '''
)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _started(client: httpx.AsyncClient, agent: str, n: int, workers: int) -> list[str]:
    ids: list[str] = []
    queue = list(range(n))

    async def worker() -> None:
        while queue:
            queue.pop()
            got = await client.post("/v1/runs", json={"goal": "go", "agent": agent})
            got.raise_for_status()
            ids.append(got.json()["run_id"])

    await asyncio.gather(*(worker() for _ in range(workers)))
    return ids


async def _stream(
    client: httpx.AsyncClient, run_id: str, latencies: list[float], opening: list[float]
) -> None:
    asked = time.time()
    async with client.stream("GET", f"/v1/runs/{run_id}/events", timeout=120) as r:
        connected = time.time()  # the server answered: it follows the run from now on
        opening.append((connected - asked) * 1000)
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                now = time.time()
                at = datetime.fromisoformat(orjson.loads(line[6:])["at"]).timestamp()
                if at >= connected:
                    latencies.append((now - at) * 1000)


async def _hold(client: httpx.AsyncClient, run_id: str, opened: asyncio.Event) -> None:
    async with client.stream("GET", f"/v1/runs/{run_id}/events", timeout=600) as r:
        async for _ in r.aiter_lines():
            opened.set()


async def measure(url: str, token: str, pid: int, streams: int, runs: int) -> dict[str, object]:
    limits = httpx.Limits(max_connections=streams * 2 + 50, max_keepalive_connections=50)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits) as client:
        # the baseline: a round trip to the same server
        probe = (await client.post("/v1/runs", json={"goal": "go", "agent": "quick"})).json()
        rtts: list[float] = []
        for _ in range(200):
            start = time.perf_counter()
            (await client.get(f"/v1/runs/{probe['run_id']}")).raise_for_status()
            rtts.append((time.perf_counter() - start) * 1000)

        start = time.perf_counter()
        await _started(client, "quick", runs, workers=16)
        runs_per_s = runs / (time.perf_counter() - start)

        busy = await _started(client, "busy", streams, workers=16)
        latencies: list[float] = []
        opening: list[float] = []
        await asyncio.gather(*(_stream(client, run_id, latencies, opening) for run_id in busy))

        before = _rss_kib(pid)
        idle = await _started(client, "idle", streams, workers=16)
        opened = [asyncio.Event() for _ in idle]
        holders = [
            asyncio.create_task(_hold(client, run_id, ev))
            for run_id, ev in zip(idle, opened, strict=True)
        ]
        await asyncio.wait_for(asyncio.gather(*(ev.wait() for ev in opened)), 120)
        await asyncio.sleep(1.0)
        after = _rss_kib(pid)
        for task in holders:
            task.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
    return {
        "bench": "serve",
        "streams": streams,
        "runs": runs,
        "runs_per_s": round(runs_per_s, 1),
        "sse_events": len(latencies),
        "sse_p50_ms": round(statistics.median(latencies), 2),
        "sse_p99_ms": round(_pct(latencies, 0.99), 2),
        "sse_open_p50_ms": round(statistics.median(opening), 2),
        "sse_open_p99_ms": round(_pct(opening, 0.99), 2),
        "rss_per_stream_kib": round((after - before) / streams, 1),
        "rss_before_streams_mib": round(before / 1024, 1),
        "baseline_rtt_p50_ms": round(statistics.median(rtts), 2),
        "sse_p50_over_rtt": round(statistics.median(latencies) / statistics.median(rtts), 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        here = Path(tmp)
        (here / "served.py").write_text(AGENTS)
        db = here / "runs.db"
        env = {**os.environ, "PYTHONPATH": str(here)}
        cli = [sys.executable, "-m", "tether"]
        made = subprocess.run(
            [*cli, "keys", "create", "--tenant", "bench", "--scope", "admin", "--db", str(db)],
            capture_output=True, text=True, check=True, env=env, cwd=here,
        )  # fmt: skip
        port = _port()
        server = subprocess.Popen(
            [*cli, "serve", "--agent", "served:quick", "--agent", "served:busy", "--agent",
             "served:idle", "--port", str(port), "--db", str(db), "--max-active-runs",
             str(args.streams * 2 + 10)],
            env=env, cwd=here, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    httpx.get(f"{url}/openapi.json", timeout=1)
                    break
                except httpx.TransportError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("tether serve did not start") from None
                    time.sleep(0.1)
            result = asyncio.run(
                measure(url, made.stdout.strip(), server.pid, args.streams, args.runs)
            )
        finally:
            server.terminate()
            server.communicate(timeout=60)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
