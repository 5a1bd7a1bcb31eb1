"""Packs: tether's own two, a third party's through its entry point, and broken ones."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tether.agentfile import load_agent_file
from tether.cli.app import app
from tether.errors import ConfigError
from tether.events import ToolCallFinished
from tether.packs import Pack, agent_from_pack, installed_packs, pack_tools
from tether.replay import load_agent
from tether.testing import ScriptedModel, call, finish


def test_tethers_own_packs_are_installed_and_make_their_agents() -> None:
    packs = {p.name: p for p in installed_packs()}
    assert {"engineering", "research"} <= set(packs)
    assert packs["engineering"].distribution == "tether"
    coder = agent_from_pack("engineering/coder")
    assert {"read_file", "write_file", "list_files", "run_command"} <= set(coder.spec.tool_map)
    assert load_agent("pack:engineering/coder").name == "coder"


async def test_the_coder_works_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "notes.txt").write_text("the build is green")
    monkeypatch.chdir(tmp_path)
    coder = agent_from_pack("engineering/coder")
    model = ScriptedModel([call("read_file", path="notes.txt"), finish("green")])
    outcome = await coder.run("is the build green?", model=model)
    [read] = [e for e in outcome.events if isinstance(e, ToolCallFinished)][:1]
    assert "the build is green" in str(read.content)


def test_the_researcher_takes_its_hosts_and_knowledge_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = agent_from_pack("research/researcher")
    assert set(plain.spec.tool_names) >= {"http_get"}
    assert "http_post" not in plain.spec.tool_map  # it reads; it does not post
    assert plain.spec.knowledge is None
    monkeypatch.setenv("TETHER_RESEARCH_HOSTS", "docs.python.org, ")
    monkeypatch.setenv("TETHER_KNOWLEDGE_DB", str(tmp_path / "kb.db"))
    informed = agent_from_pack("research/researcher")
    assert informed.spec.knowledge is not None


THIRD_PARTY = '''
from tether import Agent, tool
from tether.packs import Pack

@tool(read_only=True, open_world=False)
def balance(account: str) -> str:
    """The balance.

    Args:
        account: Which.
    """
    return "100"

def ledger(currency: str = "EUR"):
    return [balance]

pack = Pack(name="billing", description="Invoices.",
            agents={"clerk": lambda: Agent(name="clerk", tools=[balance])},
            tools={"ledger": ledger})
wrong = Pack(name="something-else", description="x")
'''


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A package on sys.path that declares packs under the entry point, one of them broken."""
    (tmp_path / "billing_pack.py").write_text(THIRD_PARTY)
    info = tmp_path / "billing_pack-1.2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: billing-pack\nVersion: 1.2.0\n")
    (info / "entry_points.txt").write_text(
        "[tether.packs]\nbilling = billing_pack:pack\nbroken = no_such_module:pack\n"
        "mislabelled = billing_pack:wrong\n"
    )
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])
    yield tmp_path
    sys.modules.pop("billing_pack", None)


def test_a_third_party_pack_brings_agents_and_tools(third_party: Path) -> None:
    packs = {p.name: p for p in installed_packs()}
    billing = packs["billing"]
    assert (billing.distribution, billing.version) == ("billing-pack", "1.2.0")
    assert agent_from_pack("billing/clerk").name == "clerk"
    assert [t.name for t in pack_tools("billing/ledger")()] == ["balance"]
    assert packs["broken"].pack is None
    assert "ModuleNotFoundError" in packs["broken"].problem
    assert "gives a pack named 'something-else'" in packs["mislabelled"].problem
    with pytest.raises(ConfigError, match="did not load"):
        agent_from_pack("broken/anything")


def test_tether_packs_lists_them_and_names_the_broken_ones(third_party: Path) -> None:
    done = CliRunner().invoke(app, ["packs"])
    assert done.exit_code == 0, done.output
    assert "pack:billing/clerk" in done.output
    assert "billing/ledger" in done.output
    assert "pack:engineering/coder" in done.output
    assert "pack broken (billing-pack) did not load: ModuleNotFoundError" in done.output


def test_an_agent_file_takes_a_packs_tool_set(third_party: Path) -> None:
    path = third_party / "agent.toml"
    path.write_text(
        textwrap.dedent("""
        name = "a"
        [[tools]]
        pack = "billing/ledger"
        currency = "USD"
        [[tools]]
        pack = "engineering/shell"
        workspace = "."
        allow = ["ls"]
    """)
    )
    agent = load_agent_file(path)
    assert {"balance", "run_command"} <= set(agent.spec.tool_map)
    for text, says in [
        ('name = "a"\n[[tools]]\npack = "billing/nothing"\n', "has no tool set 'nothing'"),
        ('name = "a"\n[[tools]]\npack = "nowhere/x"\n', "no pack 'nowhere' is installed"),
        ('name = "a"\n[[tools]]\npack = "billing"\n', "named PACK/NAME"),
        ('name = "a"\n[[tools]]\npack = "billing/ledger"\ncolour = "red"\n', "colour"),
        ('name = "a"\n[[tools]]\npack = "billing/ledger"\nbuiltin = "clock"\n', "give builtin"),
    ]:
        path.write_text(text)
        with pytest.raises(ConfigError) as raised:
            load_agent_file(path)
        assert str(path) in str(raised.value)
        assert says in str(raised.value)


def test_a_pack_with_a_bad_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="lowercase"):
        Pack(name="Billing", description="x")
    with pytest.raises(ConfigError, match="an agent's name"):
        Pack(name="b", description="x", agents={"two words": lambda: None})  # type: ignore[dict-item]


def test_tether_run_says_what_is_wrong_with_a_pack_reference(tmp_path: Path) -> None:
    done = CliRunner().invoke(app, ["run", "x", "--agent", "pack:nowhere/x", "--no-log"])
    assert done.exit_code == 2
    assert "no pack 'nowhere' is installed" in done.output


def test_two_packages_declaring_one_pack_name_load_neither(
    third_party: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    rival = tmp_path_factory.mktemp("rival")
    info = rival / "shadow_pack-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: shadow-pack\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[tether.packs]\nengineering = shadow:pack\n")
    sys.path.insert(0, str(rival))
    try:
        packs = {p.name: p for p in installed_packs()}
        assert packs["engineering"].pack is None
        assert (
            "shadow-pack, tether each declare a pack 'engineering'" in packs["engineering"].problem
        )
        with pytest.raises(ConfigError, match="uninstall all but one"):
            agent_from_pack("engineering/coder")
        assert agent_from_pack("billing/clerk").name == "clerk"  # the others still work
    finally:
        sys.path.remove(str(rival))


def test_a_pack_that_exits_on_import_or_fails_to_make_an_agent_is_a_clear_error(
    third_party: Path,
) -> None:
    (third_party / "exiting_pack.py").write_text("raise SystemExit(3)\n")
    (third_party / "failing_pack.py").write_text(
        "from tether.packs import Pack\n"
        "def bad():\n    raise RuntimeError('token=sk-SECRET')\n"
        "pack = Pack(name='failing', description='x', agents={'a': bad})\n"
    )
    info = third_party / "billing_pack-1.2.0.dist-info" / "entry_points.txt"
    info.write_text(info.read_text() + "exiting = exiting_pack:pack\nfailing = failing_pack:pack\n")
    packs = {p.name: p for p in installed_packs()}
    assert packs["exiting"].problem.startswith("SystemExit")
    with pytest.raises(ConfigError) as raised:
        agent_from_pack("failing/a")
    assert "failed to make its agent 'a': RuntimeError" in str(raised.value)
    assert "SECRET" not in str(raised.value)
    done = CliRunner().invoke(app, ["packs"])
    assert done.exit_code == 0
    assert "pack exiting (billing-pack) did not load: SystemExit" in done.output
    # a pack whose import fails with a secret in its message: listed, the secret redacted
    (third_party / "leaky_pack.py").write_text(
        "raise RuntimeError('cannot reach the API with api_key=Zq9xYw8vUt7sRq6pOn5m')\n"
    )
    info.write_text(info.read_text() + "leaky = leaky_pack:pack\n")
    done = CliRunner().invoke(app, ["packs"])
    assert "pack leaky (billing-pack) did not load: RuntimeError" in done.output
    assert "Zq9xYw8vUt7sRq6pOn5m" not in done.output
    assert "[REDACTED:" in done.output


def test_a_packs_tool_set_in_an_agent_file_is_rooted_at_the_file(
    third_party: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = third_party / "agents"
    folder.mkdir()
    (folder / "inside.txt").write_text("inside")
    path = folder / "agent.toml"
    path.write_text('name = "a"\n[[tools]]\npack = "engineering/files"\n')
    monkeypatch.chdir("/")  # not where the files are looked for
    agent = load_agent_file(path)
    model = ScriptedModel([call("read_file", path="inside.txt"), finish("read")])
    outcome = asyncio.run(agent.run("read", model=model))
    [read] = [e for e in outcome.events if isinstance(e, ToolCallFinished)][:1]
    assert "inside" in str(read.content)


def test_a_pack_whose_agents_or_tools_are_not_a_mapping_of_factories_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"Pack\(agents=...\) takes a mapping.*not list"):
        Pack(name="b", description="x", agents=["clerk"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"Pack\(tools=...\)\['ledger'\] must be a factory"):
        Pack(name="b", description="x", tools={"ledger": "not callable"})  # type: ignore[dict-item]


def test_a_packs_tool_set_that_makes_no_list_of_tools_is_a_clear_error(
    third_party: Path,
) -> None:
    (third_party / "sloppy_pack.py").write_text(
        "from tether.packs import Pack\n"
        "pack = Pack(name='sloppy', description='x', tools={\n"
        "    'nothing': lambda: None, 'text': lambda: 'abc', 'numbers': lambda: [1, 2]})\n"
    )
    info = third_party / "billing_pack-1.2.0.dist-info" / "entry_points.txt"
    info.write_text(info.read_text() + "sloppy = sloppy_pack:pack\n")
    path = third_party / "agent.toml"
    for name, made in [("nothing", "'NoneType'"), ("text", "'str'"), ("numbers", "holding 'int'")]:
        path.write_text(f'name = "a"\n[[tools]]\npack = "sloppy/{name}"\n')
        with pytest.raises(ConfigError) as raised:
            load_agent_file(path)
        assert f"[[tools]] #1 (sloppy/{name}): its factory made" in str(raised.value)
        assert made in str(raised.value)
        done = CliRunner().invoke(app, ["run", "x", "--agent", str(path), "--no-log"])
        assert done.exit_code == 2, done.output
        assert "not a list of tools" in done.output
