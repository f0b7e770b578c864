"""Quantize the committed EfficientNet-Lite0 to int8: the emulator's challenger model.

This is a one-off tool, run by hand in a throwaway virtualenv pinned by
``scripts/requirements-quantize.txt`` (the project's dev venv has onnxruntime but not
``onnx``, which onnxruntime's quantization tools import). It reads the committed float
model ``emulator/models/efficientnet-lite0/model.onnx`` (made by ``export_model.py``) and
writes ``emulator/models/efficientnet-lite0-int8/model.onnx``: the same weights, static
int8 quantization. Nothing is downloaded.

What it does:

1. Makes a fixed calibration set with the model's own preprocessing (the
   ``efficientnet-lite0`` model's settings in ``emulator/config.json``, applied by
   ``emulator.imaging`` as the emulator serves it): 17 photos and scans scikit-image ships,
   not the four it checks against (below), each whole and in seeded crops and flips, and
   seeded generated images (smooth colour fields, gradients, noise).
2. ``quant_pre_process`` (symbolic shape inference, then onnxruntime's basic graph
   optimizations, which fold the 17 constant-padding ``Pad`` nodes into their ``Conv``), then
   ``quantize_static``: QDQ format, int8 activations (asymmetric, per tensor, their ranges
   from the calibration method: min/max by default) and int8 weights (symmetric, per output
   channel), int32 biases. Each ReLU6 ``Clip`` becomes the range of its ``Conv``'s quantized
   output. The final Softmax stays float: the probabilities the endpoint answers are not
   rounded to int8 steps. The opset imports the optimizer declares and no node uses are
   dropped.
3. Runs ``onnx.checker`` and checks the graph's interface is the float model's: input
   ``input`` float32 [batch,3,224,224], output ``probabilities`` float32 [batch,1000]; opset
   17 of the default domain only.
4. Compares the int8 and the float model, both run as the emulator runs them, on the four
   photos the tests use (``chelsea``, ``coffee``, ``astronaut``, ``rocket``) and on 100
   seeded crops and flips of them: prints top-1 agreement and the largest probability
   difference, and requires the same top-1 on at least 3 of the 4 photos and on at least
   80% of the variants, and the int8 top-1 among the float top 5 on every one.
5. Prints the SHA-256 and size of the written file, and its size against the float one's.

The quantization is deterministic: running it twice, and in a new venv installed from the
requirements file, writes byte-identical files.

Usage, from the repository root, inside the quantization venv::

    python -m scripts.quantize_model [--out PATH] [--method minmax|entropy|percentile]
"""

from __future__ import annotations

# The type-ignores below: onnx is installed only in the one-off quantization venv, not in
# the project's dev venv that runs mypy.
import argparse
import hashlib
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import onnx  # type: ignore[import-not-found, unused-ignore]
import skimage.data
from onnxruntime.quantization import (  # type: ignore[import-not-found, unused-ignore]
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_static,
)
from onnxruntime.quantization.shape_inference import (  # type: ignore[import-not-found, unused-ignore]
    quant_pre_process,
)

from emulator import imaging
from emulator.config import load_config
from emulator.models import load_session

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG = REPO_ROOT / "emulator" / "config.json"
FLOAT_MODEL = "efficientnet-lite0"
"""The float model's name in ``CONFIG``: its file and its preprocessing settings."""
DEFAULT_OUT = REPO_ROOT / "emulator" / "models" / "efficientnet-lite0-int8" / "model.onnx"

INPUT_NAME = "input"
OUTPUT_NAME = "probabilities"
NUM_CLASSES = 1000
SEED = 29
METHODS = {
    "minmax": CalibrationMethod.MinMax,
    "entropy": CalibrationMethod.Entropy,
    "percentile": CalibrationMethod.Percentile,
}
DEFAULT_METHOD = "minmax"
EXCLUDED_OPS = ("Softmax",)
"""Left in float: the answer is these probabilities, which int8 would round to steps of
about 1/255."""
THREADS = 1
"""The comparison's sessions run on one thread, so its figures are the same every run."""

EVAL_PHOTOS: dict[str, Callable[[], np.ndarray]] = {
    "chelsea": skimage.data.chelsea,
    "coffee": skimage.data.coffee,
    "astronaut": skimage.data.astronaut,
    "rocket": skimage.data.rocket,
}
"""The photos the integration tests send (tests/integration/conftest.py's ``photos``);
never calibrated on (``skimage.data.cat`` is ``chelsea``, left out too)."""
CALIBRATION_PHOTOS: dict[str, Callable[[], np.ndarray]] = {
    "camera": skimage.data.camera,
    "brick": skimage.data.brick,
    "cell": skimage.data.cell,
    "clock": skimage.data.clock,
    "coins": skimage.data.coins,
    "colorwheel": skimage.data.colorwheel,
    "grass": skimage.data.grass,
    "gravel": skimage.data.gravel,
    "hubble_deep_field": skimage.data.hubble_deep_field,
    "immunohistochemistry": skimage.data.immunohistochemistry,
    "logo": skimage.data.logo,
    "microaneurysms": skimage.data.microaneurysms,
    "moon": skimage.data.moon,
    "motorcycle": lambda: skimage.data.stereo_motorcycle()[0],
    "page": skimage.data.page,
    "retina": skimage.data.retina,
    "text": skimage.data.text,
}
"""The other photos and scans the scikit-image wheel holds (none is downloaded); its tiny,
binary or drawn ones (``lfw_subset``'s 25x25 faces, ``horse``, ``checkerboard``, the phantom)
are left out."""
CROPS_PER_PHOTO = 5
GENERATED_IMAGES = 32
EVAL_VARIANTS_PER_PHOTO = 25
MIN_PHOTO_AGREEMENT = 3
"""Of the four photos, how many must keep their top-1 (chelsea's float top-1, tiger cat at
0.39, leads Egyptian cat by 0.04 only)."""
MIN_VARIANT_AGREEMENT = 0.8
"""Of their crops and flips, the share that must keep their top-1 (many are near-ties: an
astronaut crop's float top-1 is often under 0.1)."""
TOP_K = 5
"""Every photo and variant: the int8 top-1 must be among the float model's top 5."""
MAX_SIZE_RATIO = 0.3
"""The int8 file at most this share of the float one's (int8 weights: about a quarter)."""


def sha256_of(path: Path) -> str:
    """Hex SHA-256 digest of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def float_model() -> tuple[Path, imaging.PreprocessSpec]:
    """The float model's file and preprocessing, as the emulator's configuration has them."""
    spec = load_config(CONFIG).models[FLOAT_MODEL]
    assert spec.path is not None  # an image model is its ONNX file (a language model has none)
    return spec.path, spec.preprocess


def to_rgb(image: np.ndarray) -> np.ndarray:
    """A 3-channel uint8 RGB array (grey replicated, alpha dropped, bool to 0/255)."""
    if image.dtype == np.bool_:
        image = image.astype(np.uint8) * 255
    if image.ndim == 2:
        return np.repeat(image[:, :, None], 3, axis=2)
    return np.ascontiguousarray(image[:, :, :3])


def prepare(rgb: np.ndarray, spec: imaging.PreprocessSpec) -> np.ndarray:
    """RGB uint8 HxWx3 -> float32 3xCxC, exactly as the emulator prepares a decoded image."""
    square = imaging.center_crop(imaging.resize_shorter(rgb, spec.resize), spec.crop)
    return imaging.normalize(square, spec)


def random_crop(rgb: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A seeded crop of 40% to 100% of each side, mirrored half the time."""
    height, width = rgb.shape[:2]
    crop_h = int(height * rng.uniform(0.4, 1.0))
    crop_w = int(width * rng.uniform(0.4, 1.0))
    top = int(rng.integers(0, height - crop_h + 1))
    left = int(rng.integers(0, width - crop_w + 1))
    crop = rgb[top : top + crop_h, left : left + crop_w]
    return np.ascontiguousarray(crop[:, ::-1] if rng.random() < 0.5 else crop)


def generated_image(index: int, rng: np.random.Generator, size: int = 320) -> np.ndarray:
    """A seeded synthetic RGB image: a smooth colour field, a gradient or noise in turn."""
    kind = index % 3
    if kind == 0:  # smooth colour field: coarse random colours, upscaled with cubic
        cells = int(rng.integers(2, 9))
        coarse = rng.integers(0, 256, size=(cells, cells, 3)).astype(np.float32)
        field = cv2.resize(coarse, (size, size), interpolation=cv2.INTER_CUBIC)
        return np.clip(field, 0, 255).astype(np.uint8)
    if kind == 1:  # linear gradient between two random colours, at a random angle
        start, end = rng.integers(0, 256, size=(2, 3)).astype(np.float32)
        angle = rng.uniform(0.0, np.pi)
        ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) / (size - 1)
        ramp = (np.cos(angle) * xs + np.sin(angle) * ys)[:, :, None]
        ramp = (ramp - ramp.min()) / max(float(np.ptp(ramp)), 1e-6)
        return (start + (end - start) * ramp).astype(np.uint8)
    noise = rng.normal(128.0, rng.uniform(10.0, 80.0), size=(size, size, 3))  # noise
    return np.clip(noise, 0, 255).astype(np.uint8)


def calibration_batch(spec: imaging.PreprocessSpec) -> np.ndarray:
    """The fixed calibration inputs: crops of the calibration photos, then generated ones."""
    rng = np.random.default_rng(SEED)
    images = []
    for load in CALIBRATION_PHOTOS.values():
        rgb = to_rgb(load())
        images.append(prepare(rgb, spec))  # the whole photo, then seeded crops
        images.extend(prepare(random_crop(rgb, rng), spec) for _ in range(CROPS_PER_PHOTO))
    images.extend(prepare(generated_image(i, rng), spec) for i in range(GENERATED_IMAGES))
    return np.stack(images)


class Calibration(CalibrationDataReader):  # type: ignore[misc, unused-ignore]
    """Feeds the calibration inputs one at a time, in a fixed order."""

    def __init__(self, batch: np.ndarray) -> None:
        self._batch = batch
        self._rows: Iterator[np.ndarray] = iter(batch)

    def get_next(self) -> dict[str, np.ndarray] | None:
        """The next input as a batch of one, or None when all were given."""
        row = next(self._rows, None)
        return None if row is None else {INPUT_NAME: row[np.newaxis]}

    def rewind(self) -> None:
        """Start again from the first input."""
        self._rows = iter(self._batch)


def quantize(source: Path, out: Path, batch: np.ndarray, method: str) -> None:
    """Pre-process ``source``, then quantize it statically into ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="quantize-") as scratch:
        prepared = Path(scratch) / "prepared.onnx"
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=False)
        graph = onnx.load(str(prepared)).graph
        excluded = [node.name for node in graph.node if node.op_type in EXCLUDED_OPS]
        quantize_static(
            str(prepared),
            str(out),
            Calibration(batch),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=METHODS[method],
            nodes_to_exclude=excluded,
            extra_options={"CalibTensorRangeSymmetric": False, "CalibMovingAverage": False},
        )
    drop_unused_domains(out)


def drop_unused_domains(path: Path) -> None:
    """Keep only the opset imports the graph's nodes use (the default domain's always).

    onnxruntime's optimizer, run by ``quant_pre_process``, declares every domain it knows
    (``com.microsoft``, training, ATen, ...); no node of this graph is in any of them.
    """
    model = onnx.load(str(path))
    used = {""} | {node.domain for node in model.graph.node}
    kept = [opset for opset in model.opset_import if opset.domain in used]
    del model.opset_import[:]
    model.opset_import.extend(kept)
    onnx.save(model, str(path))


def dims(value_info: onnx.ValueInfoProto) -> list[int | str]:
    """Shape of a graph input/output: ints for fixed dims, names for symbolic ones."""
    shape = value_info.type.tensor_type.shape.dim
    return [d.dim_param if d.dim_param else d.dim_value for d in shape]


def interface(path: Path) -> list[tuple[str, int, list[int | str]]]:
    """Each graph input and output: name, element type, shape."""
    graph = onnx.load(str(path)).graph
    return [(v.name, v.type.tensor_type.elem_type, dims(v)) for v in [*graph.input, *graph.output]]


def check_onnx(path: Path, source: Path) -> None:
    """Run onnx.checker and require the float model's interface and a final float Softmax."""
    onnx.checker.check_model(str(path), full_check=True)
    expected = interface(source)
    float_type = onnx.TensorProto.FLOAT
    assert expected == [
        (INPUT_NAME, float_type, ["batch", 3, 224, 224]),
        (OUTPUT_NAME, float_type, ["batch", NUM_CLASSES]),
    ], expected
    assert interface(path) == expected, interface(path)
    model = onnx.load(str(path))
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)], model.opset_import
    last = model.graph.node[-1]
    assert last.op_type == "Softmax" and list(last.output) == [OUTPUT_NAME], last


def run(session: Any, batch: np.ndarray) -> np.ndarray:
    """Probabilities, one input at a time (batch size 1, as the emulator serves)."""
    return np.stack([session.run([OUTPUT_NAME], {INPUT_NAME: row[np.newaxis]})[0][0]
                     for row in batch])


def evaluation_batches(spec: imaging.PreprocessSpec) -> tuple[np.ndarray, np.ndarray]:
    """The four photos, and seeded crops and flips of them."""
    rng = np.random.default_rng(SEED + 1)
    photos: list[np.ndarray] = []
    variants: list[np.ndarray] = []
    for load in EVAL_PHOTOS.values():
        rgb = to_rgb(load())
        photos.append(prepare(rgb, spec))
        variants.extend(prepare(random_crop(rgb, rng), spec)
                        for _ in range(EVAL_VARIANTS_PER_PHOTO))
    return np.stack(photos), np.stack(variants)


def agreement(reference: np.ndarray, candidate: np.ndarray) -> tuple[int, int, float]:
    """How many rows keep their top-1, how many have the int8 top-1 among the float top
    :data:`TOP_K`, and the largest absolute probability difference."""
    top1 = candidate.argmax(axis=1)
    same = int(np.sum(reference.argmax(axis=1) == top1))
    top_k = np.argsort(-reference, axis=1, kind="stable")[:, :TOP_K]
    within = int(np.sum(np.any(top_k == top1[:, None], axis=1)))
    return same, within, float(np.max(np.abs(reference - candidate)))


def compare(source: Path, out: Path, spec: imaging.PreprocessSpec) -> None:
    """Print and check how the int8 model answers against the float one."""
    reference = load_session(source, threads=THREADS)
    candidate = load_session(out, threads=THREADS)
    photos, variants = evaluation_batches(spec)
    float_photos, int8_photos = run(reference, photos), run(candidate, photos)
    sums = int8_photos.sum(axis=1)
    assert int8_photos.shape == (len(EVAL_PHOTOS), NUM_CLASSES), int8_photos.shape
    assert np.allclose(sums, 1.0, atol=1e-4), sums
    print("top-1 on the photos, float -> int8 (probability):")
    for name, ref, got in zip(EVAL_PHOTOS, float_photos, int8_photos, strict=True):
        top_ref, top_got = int(ref.argmax()), int(got.argmax())
        mark = "same" if top_ref == top_got else "DIFFERENT"
        print(f"  {name:<10} {top_ref} ({ref[top_ref]:.4f}) -> {top_got} ({got[top_got]:.4f})"
              f"  {mark}; max |diff| {np.max(np.abs(ref - got)):.4f}")
    same, within, diff = agreement(float_photos, int8_photos)
    print(f"photos:   top-1 agreement {same}/{len(photos)}, int8 top-1 in the float top-{TOP_K} "
          f"{within}/{len(photos)}, max |p_int8 - p_float| {diff:.4f}")
    vsame, vwithin, vdiff = agreement(run(reference, variants), run(candidate, variants))
    print(f"variants: top-1 agreement {vsame}/{len(variants)} ({vsame / len(variants):.0%}), "
          f"int8 top-1 in the float top-{TOP_K} {vwithin}/{len(variants)}, "
          f"max |p_int8 - p_float| {vdiff:.4f}")
    assert same >= MIN_PHOTO_AGREEMENT, f"top-1 kept on {same} of {len(photos)} photos"
    assert vsame >= MIN_VARIANT_AGREEMENT * len(variants), f"top-1 kept on {vsame} variants"
    assert within == len(photos) and vwithin == len(variants), "an int8 top-1 off the top 5"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="ONNX file to write")
    parser.add_argument("--method", choices=sorted(METHODS), default=DEFAULT_METHOD,
                        help=f"calibration method (default {DEFAULT_METHOD})")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    source, spec = float_model()
    batch = calibration_batch(spec)
    print(f"calibration: {len(batch)} inputs ({len(CALIBRATION_PHOTOS)} photos, "
          f"{CROPS_PER_PHOTO} crops each, {GENERATED_IMAGES} generated), method {args.method}")
    quantize(source, args.out, batch, args.method)
    check_onnx(args.out, source)
    compare(source, args.out, spec)
    size, float_size = args.out.stat().st_size, source.stat().st_size
    print(f"float {source.name}: {float_size} bytes, sha256 {sha256_of(source)}")
    print(f"wrote {args.out.name}: {size} bytes ({size / float_size:.1%} of the float one's), "
          f"sha256 {sha256_of(args.out)}")
    assert size <= MAX_SIZE_RATIO * float_size, f"{size} bytes is not about a quarter"
    return 0


if __name__ == "__main__":
    sys.exit(main())
