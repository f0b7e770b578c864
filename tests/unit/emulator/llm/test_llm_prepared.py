"""The prepared model's cache (``emulator.llm.prepared``), on a tiny llama GGUF written here
(2 blocks, width 64, float32 tensors: prepared in milliseconds), so each damage a cache entry
can suffer is tried from scratch: a cached load gives the fresh load's weights, step graph and
logits bit for bit, and an entry that does not match its manifest is built again, never
trusted and never a crash."""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from emulator.llm import prepared
from emulator.llm.onnxstep import OnnxTransformer
from emulator.llm.prepared import DEFAULT_ROOT, Prepared, cache_root, prepare, step_name
from emulator.llm.transformer import Transformer

BITS = 8
TOKENS = np.array([3, 1, 4, 1, 5, 9, 2, 6])


def write_tiny_model(path: Path) -> Path:
    """A llama GGUF the engine reads: 2 blocks, width 64 (2 heads of 32, one KV head), a
    vocabulary of 40 byte tokens, random float32 weights, tied embeddings."""
    import gguf

    rng = np.random.default_rng(7)
    width, ffn, vocab, blocks = 64, 96, 40, 2
    writer = gguf.GGUFWriter(str(path), "llama")
    for add, value in ((writer.add_block_count, blocks), (writer.add_embedding_length, width),
                       (writer.add_feed_forward_length, ffn), (writer.add_head_count, 2),
                       (writer.add_head_count_kv, 1), (writer.add_context_length, 64)):
        add(value)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([chr(ord("a") + i % 26) * (1 + i // 26) for i in range(vocab)])
    writer.add_token_types([1] * vocab)
    writer.add_token_merges(["a a"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(1)
    writer.add_chat_template("{{ messages }}")

    def tensor(name: str, *shape: int) -> None:
        writer.add_tensor(name, rng.standard_normal(shape).astype(np.float32) / 8)

    tensor("token_embd.weight", vocab, width)
    tensor("output_norm.weight", width)
    for i in range(blocks):
        for name, shape in (("attn_q", (width, width)), ("attn_k", (32, width)),
                            ("attn_v", (32, width)), ("attn_output", (width, width)),
                            ("ffn_gate", (ffn, width)), ("ffn_up", (ffn, width)),
                            ("ffn_down", (width, ffn)), ("attn_norm", (width,)),
                            ("ffn_norm", (width,))):
            tensor(f"blk.{i}.{name}.weight", *shape)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny.gguf")


@pytest.fixture(scope="module")
def fresh(model: Path) -> Prepared:
    return prepare(model, BITS, None)


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The model files opened (each a preparation from the GGUF), in order."""
    opened: list[Path] = []
    original = prepared.ModelFile

    def counted(path: Path) -> prepared.ModelFile:
        opened.append(path)
        return original(path)

    monkeypatch.setattr(prepared, "ModelFile", counted)
    return opened


def arrays(model: Prepared) -> dict[str, np.ndarray]:
    weights = model.weights
    named = {"embeddings": weights.embeddings, "head": weights.head,
             "output_norm": weights.output_norm}
    for index, block in enumerate(weights.blocks):
        named.update({f"{index}.{k}": v for k, v in vars(block).items()})
    return named


def assert_identical(found: Prepared, expected: Prepared) -> None:
    assert found.vocabulary == expected.vocabulary
    assert found.weights.shape == expected.weights.shape
    assert found.step == expected.step
    expected_arrays = arrays(expected)
    for name, array in arrays(found).items():
        assert array.dtype == expected_arrays[name].dtype, name
        assert array.tobytes() == expected_arrays[name].tobytes(), name


def logits(model: Prepared) -> tuple[np.ndarray, np.ndarray]:
    """The prompt's logits in numpy, then one step's in onnxruntime from the model's graph."""
    transformer = OnnxTransformer(model.weights, bits=BITS, step=model.step)
    cache = transformer.new_cache(16)
    prompt = Transformer.forward(transformer, TOKENS, cache, all_logits=True)
    return prompt, transformer.forward(np.array([7]), cache)


def entry(root: Path) -> Path:
    (directory,) = [p for p in root.iterdir() if p.is_dir()]
    return directory


def entry_of(root: Path, model: Path) -> Path:
    (directory,) = root.glob(f"{model.stem}-" + "[0-9a-f]" * 16)
    return directory


def test_a_cached_load_gives_the_fresh_loads_weights_graph_and_logits_exactly(
        model: Path, fresh: Prepared, tmp_path: Path, builds: list[Path]) -> None:
    first = prepare(model, BITS, tmp_path)
    cached = prepare(model, BITS, tmp_path)

    assert builds == [model]  # the second load never opened the model file
    assert isinstance(cached.weights.embeddings.base, np.memmap)  # mapped, not read
    assert cached.weights.head is cached.weights.embeddings  # tied: one array
    assert_identical(first, fresh)
    assert_identical(cached, fresh)
    for found, expected in zip(logits(cached), logits(fresh), strict=True):
        assert np.array_equal(found, expected)


def test_a_load_without_a_step_graph_then_one_with_adds_only_the_graph(
        model: Path, fresh: Prepared, tmp_path: Path, builds: list[Path]) -> None:
    assert prepare(model, None, tmp_path).step is None
    assert_identical(prepare(model, BITS, tmp_path), fresh)
    assert_identical(prepare(model, BITS, tmp_path), fresh)
    assert builds == [model]


def _flip_a_weight(directory: Path) -> None:
    path = directory / "blk1.down.npy"
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x40
    path.write_bytes(bytes(data))


def _truncate_the_step(directory: Path) -> None:
    path = directory / step_name(BITS)
    path.write_bytes(path.read_bytes()[:1000])


DAMAGES: dict[str, Callable[[Path], None]] = {
    "a weight's byte flipped": _flip_a_weight,
    "the step graph truncated": _truncate_the_step,
    "an array removed": lambda d: (d / "embeddings.npy").unlink(),
    "the vocabulary not JSON": lambda d: (d / "vocabulary.json").write_text("{"),
    "the manifest not JSON": lambda d: (d / "manifest.json").write_bytes(b"\xff\x00"),
    "the manifest a list": lambda d: (d / "manifest.json").write_text("[]"),
    "the manifest removed": lambda d: (d / "manifest.json").unlink(),
    "an array's header garbage": lambda d: (d / "output_norm.npy").write_bytes(b"x" * 300),
}


@pytest.mark.parametrize("damage", DAMAGES, ids=list(DAMAGES))
def test_a_damaged_entry_is_built_again_never_trusted(
        damage: str, model: Path, fresh: Prepared, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    prepare(model, BITS, tmp_path)
    DAMAGES[damage](entry(tmp_path))

    with caplog.at_level(logging.WARNING, logger="emulator"):
        rebuilt = prepare(model, BITS, tmp_path)

    assert_identical(rebuilt, fresh)
    assert_identical(prepare(model, BITS, tmp_path), fresh)  # the entry is whole again
    assert len(list(tmp_path.iterdir())) == 2  # the entry and the lock, nothing left aside
    if damage != "the manifest removed":
        assert "unusable" in caplog.text


def test_another_model_file_or_preparing_code_makes_a_new_entry_the_old_removed(
        model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "cache"
    prepare(model, None, root)
    first = entry(root)
    (tmp_path / "other").mkdir()
    other = write_tiny_model(tmp_path / "other" / model.name)  # another file of that name
    prepare(other, None, root)
    second = entry(root)
    monkeypatch.setattr(prepared, "FORMAT", prepared.FORMAT + 1)
    prepare(other, None, root)

    assert len({first, second, entry(root)}) == 3


def test_a_rebuild_removes_a_dead_writers_leftovers_never_another_models_entry(
        model: Path, tmp_path: Path) -> None:
    root = tmp_path / "cache"
    prepare(model, None, root)
    other = tmp_path / "tiny-2.gguf"  # its entries' names begin as this model's do
    other.write_bytes(model.read_bytes())
    prepare(other, None, root)
    others_entry = next(root.glob("tiny-2-*"))
    leftover = root / f".{entry_of(root, model).name}.99999"
    leftover.mkdir()
    (entry_of(root, model) / "manifest.json").unlink()

    prepare(model, None, root)

    assert not leftover.exists() and others_entry.is_dir()
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [".lock", others_entry.name, entry_of(root, model).name])


def test_a_cache_that_cannot_be_written_prepares_in_memory(
        model: Path, fresh: Prepared, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    with caplog.at_level(logging.WARNING, logger="emulator"):
        assert_identical(prepare(model, BITS, not_a_directory), fresh)
    assert "cannot be written" in caplog.text


def test_a_disk_that_fills_while_the_entry_is_written_serves_the_model_and_leaves_nothing(
        model: Path, fresh: Prepared, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, builds: list[Path]) -> None:
    saved: list[str] = []
    original = np.save

    def save(path: Path, array: np.ndarray, allow_pickle: bool) -> None:
        if len(saved) == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        saved.append(str(path))
        original(path, array, allow_pickle=allow_pickle)

    monkeypatch.setattr(prepared.np, "save", save)
    with caplog.at_level(logging.WARNING, logger="emulator"):
        assert_identical(prepare(model, BITS, tmp_path), fresh)
    assert len(saved) == 3 and "No space left" in caplog.text
    assert builds == [model]  # what was prepared is served, not prepared again
    assert [p.name for p in tmp_path.iterdir()] == [".lock"]


def test_loads_at_once_prepare_the_model_once(
        model: Path, fresh: Prepared, tmp_path: Path, builds: list[Path]) -> None:
    results: list[Prepared] = []
    # flock's lock belongs to an open file, so threads contend for it as processes do
    threads = [threading.Thread(target=lambda: results.append(prepare(model, BITS, tmp_path)))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert len(results) == 4 and builds == [model]
    for result in results:
        assert_identical(result, fresh)


def test_the_cache_lives_in_build_unless_the_environment_says() -> None:
    assert cache_root({}) == DEFAULT_ROOT
    assert DEFAULT_ROOT.parent.name == "build"
    assert cache_root({"EMULATOR_LLM_CACHE": "/elsewhere"}) == Path("/elsewhere")
    assert cache_root({"EMULATOR_LLM_CACHE": "off"}) is None
