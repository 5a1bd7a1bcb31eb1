"""The prices of models, and the cost of one request.

A price comes from the first of these that knows the model:

1. ``price=Price(...)`` passed to an adapter (or to ``cost_of``);
2. ``PRICES``, your own prices by model name (empty unless you add to it);
3. the price data of `genai-prices <https://pypi.org/project/genai-prices/>`_, kept by
   Pydantic, for the provider the requests went to. It is installed with ``tether[openai]``
   and ``tether[anthropic]``; without it only 1 and 2 price anything.

A model none of them knows has an unknown price: its requests cost ``None`` (unknown), never
0.0, and a run's ``max_cost`` cannot be enforced for it (the outcome says so). Models that run
on your own machine (``local:``, ``ollama:``) cost 0.0: there is no one to pay.

The provider decides the price, not the model's name alone: a model served at a base URL
that is not its provider's (vLLM, llama.cpp, LM Studio, a proxy) has no price unless you set
one, even if it shares a name with one of OpenAI's. Hosted services that genai-prices knows
by their API's URL (OpenAI, Anthropic, Azure, Groq, OpenRouter, ...) are priced as such.

genai-prices reads the data that ships inside the package: pricing never reaches the network.
Its background updater (``genai_prices.UpdatePrices``) fetches newer prices only when started,
and tether never starts it (if your own program does, the prices it fetched are used).

What a cost counts: input and output tokens (reasoning tokens are output tokens, as the
providers bill them); prompt-cache reads and writes at their own rates where the adapter
reports them (OpenAI's cached input, Anthropic's cache reads and writes; a write is priced at
the 5-minute rate); genai-prices' tiers (a dearer rate above some number of input tokens) and
dated price changes. What it does not count: audio and image tokens, per-request and tool fees
(web search), batch discounts and OpenAI's service tiers (flex, priority): the cost is that of
a standard request. Prices are US dollars per million tokens.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from tether._internal.frozen import frozen

if TYPE_CHECKING:
    from decimal import Decimal

    from genai_prices.types import PriceCalculation, TieredPrices

__all__ = ["PRICES", "Price", "cost_of", "price_of"]


@frozen
class Price:
    """US dollars per million tokens: input and output, and prompt-cache reads and writes."""

    input_per_mtok: float
    """Per million prompt tokens."""
    output_per_mtok: float
    """Per million generated tokens."""
    cache_read_per_mtok: float | None = None
    """Per million prompt tokens read from the provider's prompt cache (default: the input price)."""
    cache_write_per_mtok: float | None = None
    """Per million prompt tokens written to the prompt cache (default: the input price)."""

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
    ) -> float:
        """The cost of one request; ``input_tokens`` includes the cache reads and writes."""
        read, write = _cache_shares(input_tokens, cache_read_tokens, cache_write_tokens)
        read_price = (
            self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        )
        write_price = (
            self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        )
        return (
            (input_tokens - read - write) * self.input_per_mtok
            + read * read_price
            + write * write_price
            + output_tokens * self.output_per_mtok
        ) / 1e6


PRICES: dict[str, Price] = {}
"""Your own prices by model name, ahead of genai-prices' (``PRICES["my-model"] = Price(...)``).

A name is the model's name at its provider (``gpt-4o``, not ``openai:gpt-4o``). Dated
snapshots such as ``gpt-4o-2024-08-06`` or ``claude-sonnet-4-5-20250929`` match their
family's entry, and ``-latest`` too. An entry here applies wherever the model is served,
custom base URLs included: setting it is saying so.
"""

_PROVIDERS = {"openai": "openai", "anthropic": "anthropic"}
"""tether's model-name prefixes that name a provider, and genai-prices' id for it."""
_FREE = frozenset({"local", "ollama"})
"""tether's model-name prefixes of models that run on your own machine."""
_FREE_PRICE = Price(input_per_mtok=0.0, output_per_mtok=0.0)


def price_of(
    model: str, *, provider: str | None = None, api_url: str | None = None
) -> Price | None:
    """The price of a model, or ``None`` when unknown.

    Args:
        model: The model's name (``gpt-4o``), or tether's name for it (``openai:gpt-4o``,
            ``anthropic:claude-sonnet-4-5``; ``local:`` and ``ollama:`` models are free).
        provider: genai-prices' id of the provider that serves it (``openai``, ``anthropic``,
            ``groq``...). Default: the one ``api_url`` names, else tether's prefix, else a
            guess from the name (``gpt-4o`` is OpenAI's).
        api_url: The base URL the requests go to (the adapters pass theirs). A server that
            genai-prices does not know by its URL (your own, a proxy) has no price.

    Returns:
        ``PRICES``' entry if there is one, else genai-prices' price at today's date (its base
        rate: a tier above some number of input tokens may cost more, which ``cost_of``
        counts). ``None`` when neither knows it, or genai-prices' price is not per token.
    """
    prefix, name = _split(model)
    if prefix in _FREE:
        return _FREE_PRICE
    own = _own_price(name)
    if own is not None:
        return own
    found = _calculate(name, _provider(prefix, provider, api_url), api_url, 0, 0, 0, 0)
    if found is None:
        return None
    prices = found.model_price
    input_price, output_price = prices.input_mtok, prices.output_mtok
    assert input_price is not None  # _calculate returns only prices of tokens
    assert output_price is not None
    read_price, write_price = prices.cache_read_mtok, prices.cache_write_mtok
    return Price(
        input_per_mtok=_base(input_price),
        output_per_mtok=_base(output_price),
        cache_read_per_mtok=None if read_price is None else _base(read_price),
        cache_write_per_mtok=None if write_price is None else _base(write_price),
    )


def cost_of(
    model: str,
    input_tokens: int,
    output_tokens: int,
    *,
    price: Price | None = None,
    provider: str | None = None,
    api_url: str | None = None,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
) -> float | None:
    """The cost of one request in US dollars; ``None`` when the price is unknown.

    Args:
        model: As for ``price_of``.
        input_tokens: Every prompt token, cache reads and writes included.
        output_tokens: Generated tokens (reasoning included).
        price: The price to use, ahead of every other source.
        provider: As for ``price_of``.
        api_url: As for ``price_of``.
        cache_read_tokens: The prompt tokens read from the prompt cache.
        cache_write_tokens: The prompt tokens written to the prompt cache.
    """
    prefix, name = _split(model)
    if price is None:
        if prefix in _FREE:
            return 0.0
        price = _own_price(name)
    if price is not None:
        return price.cost(
            input_tokens,
            output_tokens,
            cache_read_tokens=cache_read_tokens,
            cache_write_tokens=cache_write_tokens,
        )
    read, write = _cache_shares(input_tokens, cache_read_tokens, cache_write_tokens)
    found = _calculate(
        name,
        _provider(prefix, provider, api_url),
        api_url,
        input_tokens,
        output_tokens,
        read,
        write,
    )
    return None if found is None else float(found.total_price)


def _split(model: str) -> tuple[str | None, str]:
    """The prefix of tether's name for a model (``openai``, ``ollama``...), and its own name.

    Only tether's own prefixes count: an Ollama model's name has a colon of its own
    (``qwen2.5-coder:1.5b``).
    """
    prefix, colon, rest = model.partition(":")
    if colon and (prefix in _PROVIDERS or prefix in _FREE):
        return prefix, rest
    return None, model


def _provider(prefix: str | None, provider: str | None, api_url: str | None) -> str | None:
    """genai-prices' provider id: the one given, else none if a URL says, else tether's prefix."""
    if provider is not None or api_url is not None or prefix is None:
        return provider
    return _PROVIDERS.get(prefix)


def _own_price(name: str) -> Price | None:
    """The entry in ``PRICES`` for the model's name, or for its family."""
    found = PRICES.get(name)
    if found is not None:
        return found
    families = [
        known
        for known in PRICES
        if name.startswith(known + "-") and _is_version_suffix(name[len(known) + 1 :])
    ]
    return PRICES[max(families, key=len)] if families else None


def _is_version_suffix(rest: str) -> bool:
    """``20250929``, ``2024-08-06`` or ``latest``: a snapshot of the same model.

    A short number is not a snapshot but another model: ``claude-opus-4-6`` is not Opus 4.
    """
    return rest == "latest" or re.fullmatch(r"\d{8}|\d{4}-\d{2}-\d{2}", rest) is not None


def _cache_shares(input_tokens: int, read: int, write: int) -> tuple[int, int]:
    """Cache reads and writes as parts of the input (a server's bad counts never exceed it)."""
    read = max(0, min(read, input_tokens))
    return read, max(0, min(write, input_tokens - read))


def _calculate(
    model: str,
    provider: str | None,
    api_url: str | None,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_write_tokens: int,
) -> PriceCalculation | None:
    """genai-prices' price of one request, or ``None`` if it prices no such model per token.

    Imported here, on first use: it takes a moment, and ``import tether`` must not pay it.
    """
    try:
        from genai_prices import Usage, calc_price
    except ImportError:
        return None
    if not model:
        return None
    usage = Usage(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
    )
    try:
        if provider is not None:
            found = calc_price(usage, model, provider_id=provider)
        else:
            found = calc_price(usage, model, provider_api_url=api_url)
    except LookupError:  # no such provider, or no such model at it
        return None
    prices = found.model_price
    if prices.input_mtok is None or prices.output_mtok is None:
        return None  # priced per request, per image...: not a price of tokens
    return found


def _base(value: Decimal | TieredPrices) -> float:
    """A price per million tokens; of tiered prices, the base rate."""
    from genai_prices.types import TieredPrices

    return float(value.base if isinstance(value, TieredPrices) else value)
