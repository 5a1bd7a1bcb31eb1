"""The trace page in a real headless Chromium (Debian's, driven by Playwright): the run list,
a run appearing, its timeline growing live, an approval given by a click, the run finishing.
Screenshots are kept in ``test-artifacts/trace-page/`` (or ``$TETHER_TEST_ARTIFACTS``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import serve, tether_cli

CHROMIUM = "/usr/bin/chromium"
# what the machine notes say Chromium needs here: no sandbox as root, and no background
# connections (the closed network refuses them, many at a time)
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
AGENT = textwrap.dedent(
    '''
    import asyncio
    from tether import Agent, tool
    from tether.policy import RulePolicy, Rules, require_approval
    from tether.testing import ScriptedModel, call, finish

    @tool(read_only=True, open_world=False)
    async def look(what: str) -> str:
        """Looks something up."""
        await asyncio.sleep(0.3)
        return f"{what}: found (password=[REDACTED:password])"

    @tool(destructive=True, open_world=False)
    def wire(amount: float, to: str) -> str:
        """Wires money."""
        return f"wired {amount} to {to}"

    agent = Agent(
        name="payer",
        model=ScriptedModel(
            [call("look", what="invoice 7"), call("wire", amount=12.5, to="ACME"), finish("paid")]
        ),
        tools=[look, wire],
        policy=RulePolicy(Rules(rules=(require_approval("wire"),))),
    )
    '''
)


def _chromium() -> str:
    """Debian's Chromium, installed by this test's project when it is missing (CI)."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        pytest.skip("the trace page test needs Debian's chromium (apt-get install chromium)")
    for args in (["update", "-q"], ["install", "-y", "-q", "chromium"]):
        done = subprocess.run(
            [apt, *args], capture_output=True, text=True, timeout=900, check=False
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return CHROMIUM


@pytest.fixture
def page_server(tmp_path: Path) -> Iterator[tuple[str, str]]:
    (tmp_path / "traced.py").write_text(AGENT)
    db = tmp_path / "runs.db"
    made = tether_cli("keys", "create", "--tenant", "acme", "--scope", "admin", "--db", str(db),
                      cwd=tmp_path)  # fmt: skip
    assert made.returncode == 0, made.stderr
    proc, url = serve(tmp_path, db, "traced:agent")
    yield url, made.stdout.strip()
    proc.terminate()
    proc.communicate(timeout=30)


@pytest.mark.timeout(900)
def test_watch_a_run_appear_approve_its_call_and_see_it_finish(
    page_server: tuple[str, str],
) -> None:
    from playwright.sync_api import expect, sync_playwright

    url, token = page_server
    shots = Path(os.environ.get("TETHER_TEST_ARTIFACTS", "test-artifacts")) / "trace-page"
    shots.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1366, "height": 800})  # a laptop
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(url + "/")
            page.fill("#key", token)
            page.click("#use-key")
            expect(page.locator("#runs tr")).to_have_count(0)
            # a run started elsewhere appears in the list
            auth = {"Authorization": f"Bearer {token}"}
            started = httpx.post(f"{url}/v1/runs", json={"goal": "pay invoice 7"}, headers=auth)
            run_id = started.json()["run_id"]
            row = page.locator(f'tr[data-run="{run_id}"]')
            expect(row).to_be_visible(timeout=10_000)
            page.screenshot(path=str(shots / "1-run-listed.png"))
            row.click()
            # its timeline, live, up to the held call
            expect(page.locator(".event.approval_requested button.approve")).to_be_visible(
                timeout=20_000
            )
            expect(page.locator("#timeline .event.policy_decided")).not_to_have_count(0)
            expect(page.locator("#timeline mark.redacted").first).to_have_text(
                "[REDACTED:password]"
            )
            expect(page.locator("#run-status")).to_have_text("waiting_for_approval")
            page.screenshot(path=str(shots / "2-waiting-for-approval.png"), full_page=True)
            page.click(".event.approval_requested button.approve")
            expect(page.locator("#timeline .event.run_finished")).to_be_visible(timeout=20_000)
            expect(page.locator("#run-status")).to_have_text("finished")
            expect(page.locator("#timeline .event.approval_given pre")).to_contain_text(
                "approved by API key"
            )
            wired = page.locator("#timeline .event.tool_call_finished pre", has_text="wire ")
            expect(wired).to_contain_text("wired 12.5 to ACME")
            seqs = [
                int(s) for s in page.locator("#timeline .event").evaluate_all(
                    "nodes => nodes.map(n => n.dataset.seq)"
                )
            ]  # fmt: skip
            assert seqs == list(range(len(seqs)))  # every event once, in order
            page.screenshot(path=str(shots / "3-finished.png"), full_page=True)
            assert errors == []
        finally:
            browser.close()
    run = httpx.get(f"{url}/v1/runs/{run_id}", headers=auth).json()
    assert run["status"] == "finished"
