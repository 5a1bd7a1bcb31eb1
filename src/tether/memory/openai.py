"""An embedder over any OpenAI-compatible ``/v1/embeddings``: OpenAI, Ollama, vLLM, llama.cpp."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether._internal.redirects import refused_redirect
from tether.errors import MissingExtraError, ModelError
from tether.memory.embedder import Embedder

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIEmbedder"]


class OpenAIEmbedder(Embedder):
    """Embeddings from an OpenAI-compatible server, through the official ``openai`` SDK.

    ``model``: the embedding model's name on that server (``text-embedding-3-small``,
    ``nomic-embed-text`` on Ollama). ``base_url``: the server's ``/v1`` URL (``None``:
    OpenAI, or ``$OPENAI_BASE_URL``). ``api_key``: ``$OPENAI_API_KEY`` when not given (a
    local server needs none). ``dimensions``: ask for shorter vectors, where the model can.
    A failed request is a ``ModelError`` (memory turns it into a warning, never a failed run).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        client: AsyncOpenAI | None = None,
    ) -> None:
        self.model = model
        self.dimensions = dimensions
        self.batch_size = batch_size
        self._base_url = base_url
        self._api_key = api_key
        self._timeout = timeout
        self._client = client
        if client is None and importlib.util.find_spec("openai") is None:
            raise MissingExtraError("openai", "openai")

    @property
    def name(self) -> str:
        """``openai:<model>`` (``:<dimensions>`` when shortened)."""
        return f"openai:{self.model}" + (f":{self.dimensions}" if self.dimensions else "")

    def _connect(self) -> AsyncOpenAI:
        if self._client is None:
            import openai

            key = self._api_key or os.environ.get("OPENAI_API_KEY") or "not-needed"
            self._client = openai.AsyncOpenAI(
                api_key=key,
                base_url=self._base_url,
                max_retries=2,
                timeout=self._timeout,
                # The SDK's own follows redirects, to any host (tether._internal.redirects).
                http_client=openai.DefaultAsyncHttpxClient(follow_redirects=False),
            )
        return self._client

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order."""
        import openai

        client = self._connect()
        out: list[list[float]] = []
        for at in range(0, len(texts), self.batch_size):
            batch = list(texts[at : at + self.batch_size])
            try:
                if self.dimensions is None:
                    reply = await client.embeddings.create(model=self.model, input=batch)
                else:
                    reply = await client.embeddings.create(
                        model=self.model, input=batch, dimensions=self.dimensions
                    )
            except openai.APIStatusError as exc:
                if not 300 <= exc.status_code < 400:
                    raise self._failed(exc) from None
                raise refused_redirect(
                    self.name,
                    who=f"the embedder {self.name}",
                    status=exc.status_code,
                    url=str(exc.response.request.url),
                    location=exc.response.headers.get("location"),
                    base_url=str(client.base_url),
                ) from None
            except openai.OpenAIError as exc:
                raise self._failed(exc) from None
            rows = sorted(reply.data, key=lambda d: d.index)
            if len(rows) != len(batch):
                raise ModelError(
                    f"the embedder {self.name} returned {len(rows)} vectors for {len(batch)} texts",
                    model=self.name,
                )
            out.extend([float(x) for x in row.embedding] for row in rows)
        return out

    def _failed(self, exc: Exception) -> ModelError:
        import openai

        return ModelError(
            f"the embedder {self.name} failed: {exc}. Check that the server runs and "
            "serves this embedding model",
            model=self.name,
            transient=isinstance(exc, openai.APIConnectionError | openai.RateLimitError),
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        client, self._client = self._client, None
        if client is not None:
            await client.close()
