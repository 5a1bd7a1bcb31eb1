"""More reference MCP servers from PyPI through agent runs: mcp-server-git on a repository
in a temporary directory, and mcp-server-fetch against a page served on loopback only."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tether import Agent
from tether.events import ToolCallFinished
from tether.outcome import RunOutcome
from tether.policy import RulePolicy, Rules, allow
from tether.testing import ScriptedModel, call, finish
from tether.tools.mcp import McpServer


def results(outcome: RunOutcome[str]) -> list[ToolCallFinished]:
    return [
        e for e in outcome.events if isinstance(e, ToolCallFinished) and e.tool != "finish_task"
    ]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    where = tmp_path / "repo"
    where.mkdir()

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=where, check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "T")
    (where / "notes.txt").write_text("first\n")
    git("add", "notes.txt")
    git("commit", "-q", "-m", "Add the first note")
    (where / "notes.txt").write_text("first\nsecond\n")
    return where


async def test_mcp_server_git_reads_a_repository_through_an_agent_run(repo: Path) -> None:
    server = McpServer.stdio(
        "git", sys.executable, "-m", "mcp_server_git", "--repository", str(repo)
    )
    async with server:
        tools = await server.tools()
        names = {t.name for t in tools}
        assert {"git_status", "git_log", "git_diff_unstaged", "git_commit"} <= names
        assert {t.definition.origin for t in tools} == {"mcp:git"}
        script = [
            call("git_status", repo_path=str(repo)),
            call("git_log", repo_path=str(repo), max_count=5),
            call("git_diff_unstaged", repo_path=str(repo)),
            call("git_commit", repo_path=str(repo), message="sneaky"),  # unannotated: denied
            finish("one commit, one change"),
        ]
        reads = ("git_status", "git_log", "git_diff_unstaged")
        agent = Agent(
            model=ScriptedModel(script),
            tools=tools,
            policy=RulePolicy(Rules(rules=tuple(allow(name) for name in reads))),
        )
        outcome = await agent.run(f"What is the state of the repository at {repo}?")
    assert outcome.status == "finished"
    status, log, diff, commit = results(outcome)
    assert "notes.txt" in str(status.content)
    assert "Add the first note" in str(log.content)
    assert "+second" in str(diff.content)
    assert commit.is_error
    assert "denied by policy" in str(commit.content)
    head = subprocess.run(  # noqa: ASYNC221 - the run has ended
        ["git", "log", "--oneline"], cwd=repo, capture_output=True, text=True, check=True
    )
    assert "sneaky" not in head.stdout


PAGE = b"<html><head><title>Loopback</title></head><body><h1>Opening hours</h1><p>Mon to Fri, 9 to 17.</p></body></html>"


@pytest.fixture
def site() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/robots.txt":
                body, kind = b"User-agent: *\nAllow: /\n", "text/plain"
            else:
                body, kind = PAGE, "text/html"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


async def test_mcp_server_fetch_reads_a_loopback_page_through_an_agent_run(site: str) -> None:
    server = McpServer.stdio(
        "fetch", sys.executable, "-m", "mcp_server_fetch", "--allow-private-ips"
    )  # loopback only: the page is served by this test
    async with server:
        tools = await server.tools()
        assert "fetch" in {t.name for t in tools}
        agent = Agent(
            model=ScriptedModel([call("fetch", url=f"{site}/hours"), finish("9 to 17")]),
            tools=tools,
            policy=RulePolicy(Rules(rules=(allow("fetch"),))),
        )
        outcome = await agent.run("When is it open?")
    assert outcome.status == "finished"
    [page] = results(outcome)
    assert not page.is_error, page.content
    assert "Mon to Fri, 9 to 17" in str(page.content)
    [fetch] = [t for t in tools if t.name == "fetch"]
    assert RulePolicy().annotations(fetch.definition).is_untrusted_output  # outside text
