"""Train a small iris classifier with scikit-learn and export it to ONNX.

This is a one-off tool, run by hand in a throwaway virtualenv pinned by
``scripts/requirements-export-iris.txt``. It produces the committed artifact
``emulator/models/iris/model.onnx``. scikit-learn and skl2onnx are never runtime
dependencies of sagegate: the emulator only needs onnxruntime.

What it does:

1. Loads Fisher's iris data bundled with scikit-learn (``load_iris``: 150 rows, 4
   features in cm, 3 classes; nothing is downloaded).
2. Trains ``Pipeline(StandardScaler, LogisticRegression(max_iter=1000))`` on all 150
   rows (lbfgs is deterministic; ``random_state`` is fixed anyway) and prints the
   training accuracy and a seeded 5-fold cross-validated accuracy.
3. Converts it with skl2onnx (no ZipMap, target opset 17 / ai.onnx.ml 3), then keeps
   only the probabilities: one input ``features`` float32 [N,4] (sepal length, sepal
   width, petal length, petal width, cm), one output ``probabilities`` float32 [N,3]
   (setosa, versicolor, virginica). The label output and every node and initializer
   only it used are removed; the graph name is fixed (skl2onnx's default is random).
4. Runs ``onnx.checker`` and checks the graph's names, shapes and dtypes.
5. Compares onnxruntime with ``predict_proba`` on the 150 rows and on 1000 seeded
   random points spanning the data's range (max abs diff must be < 1e-5; the argmax
   must equal ``predict``).
6. Prints the SHA-256 and size of the written file.

The export is deterministic: running it twice yields byte-identical files.

Usage, from the repository root, inside the export venv::

    python scripts/export_iris.py [--out PATH]
"""

from __future__ import annotations

# The type-ignores below: scikit-learn, skl2onnx and onnx are installed only in the
# one-off export venv, not in the project's dev venv that runs mypy.
import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx  # type: ignore[import-not-found, unused-ignore]
import onnxruntime as ort
from skl2onnx import to_onnx  # type: ignore[import-not-found, unused-ignore]
from skl2onnx.common.data_types import FloatTensorType  # type: ignore[import-not-found, unused-ignore]
from sklearn.datasets import load_iris  # type: ignore[import-not-found, unused-ignore]
from sklearn.linear_model import LogisticRegression  # type: ignore[import-not-found, unused-ignore]
from sklearn.model_selection import StratifiedKFold, cross_val_score  # type: ignore[import-not-found, unused-ignore]
from sklearn.pipeline import Pipeline  # type: ignore[import-not-found, unused-ignore]
from sklearn.preprocessing import StandardScaler  # type: ignore[import-not-found, unused-ignore]

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO_ROOT / "emulator" / "models" / "iris" / "model.onnx"

GRAPH_NAME = "iris"
INPUT_NAME = "features"
OUTPUT_NAME = "probabilities"
FEATURES = ("sepal length (cm)", "sepal width (cm)", "petal length (cm)", "petal width (cm)")
CLASSES = ("setosa", "versicolor", "virginica")
TARGET_OPSET = {"": 17, "ai.onnx.ml": 3}
SEED = 0
MAX_ITER = 1000
MAX_ABS_DIFF = 1e-5
RANDOM_POINTS = 1000


def sha256_of(path: Path) -> str:
    """Hex SHA-256 digest of a file."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_data() -> tuple[np.ndarray, np.ndarray]:
    """The bundled iris data: float32 features [150,4] and int labels [150]."""
    iris = load_iris()
    assert tuple(iris.feature_names) == FEATURES, iris.feature_names
    assert tuple(iris.target_names) == CLASSES, iris.target_names
    return iris.data.astype(np.float32), iris.target


def make_pipeline() -> Pipeline:
    """The untrained classifier: standardise, then multinomial logistic regression."""
    return Pipeline(
        [
            ("scale", StandardScaler()),
            ("classify", LogisticRegression(max_iter=MAX_ITER, random_state=SEED)),
        ]
    )


def train(features: np.ndarray, labels: np.ndarray) -> Pipeline:
    """Fit on every row; print training and 5-fold cross-validated accuracy."""
    folds = StratifiedKFold(n_splits=5, shuffle=True, random_state=SEED)
    scores = cross_val_score(make_pipeline(), features, labels, cv=folds)
    pipeline = make_pipeline().fit(features, labels)
    assert tuple(pipeline.classes_) == (0, 1, 2), pipeline.classes_
    train_accuracy = float(pipeline.score(features, labels))
    print(f"training accuracy (150 rows):      {train_accuracy:.4f}")
    print(
        f"5-fold CV accuracy (seed {SEED}):      {scores.mean():.4f} "
        f"(folds {', '.join(f'{s:.4f}' for s in scores)})"
    )
    return pipeline


def keep_only(graph: Any, output_name: str) -> None:
    """Make ``output_name`` the graph's only output; drop what nothing else needs."""
    graph_outputs = [o for o in graph.output if o.name == output_name]
    needed = {output_name}
    kept = []
    for node in reversed(graph.node):
        if needed.intersection(node.output):
            kept.append(node)
            needed.update(name for name in node.input if name)
    kept.reverse()
    initializers = [init for init in graph.initializer if init.name in needed]
    del graph.output[:], graph.node[:], graph.initializer[:]
    graph.output.extend(graph_outputs)
    graph.node.extend(kept)
    graph.initializer.extend(initializers)


def rename_value(graph: Any, old: str, new: str) -> None:
    """Rename a tensor everywhere it appears in ``graph``."""
    for node in graph.node:
        node.input[:] = [new if name == old else name for name in node.input]
        node.output[:] = [new if name == old else name for name in node.output]
    for value in [*graph.input, *graph.output, *graph.value_info]:
        if value.name == old:
            value.name = new


def convert(pipeline: Pipeline) -> Any:
    """skl2onnx conversion reduced to ``features`` -> ``probabilities``."""
    model = to_onnx(
        pipeline,
        initial_types=[(INPUT_NAME, FloatTensorType([None, len(FEATURES)]))],
        options={id(pipeline.named_steps["classify"]): {"zipmap": False}},
        target_opset=TARGET_OPSET,
        name=GRAPH_NAME,
    )
    graph = model.graph
    # skl2onnx names them (label, probabilities) or (output_label, output_probability)
    # depending on its version; the probabilities always come second.
    (label, probability) = (o.name for o in graph.output)
    assert "label" in label and "probabilit" in probability, (label, probability)
    keep_only(graph, probability)
    if probability != OUTPUT_NAME:
        rename_value(graph, probability, OUTPUT_NAME)
    # The batch axis gets a name instead of skl2onnx's anonymous dimension.
    for value in [*graph.input, *graph.output]:
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    # skl2onnx lists the default domain twice in some versions: keep one entry per domain.
    opsets = {entry.domain: entry.version for entry in model.opset_import}
    del model.opset_import[:]
    for domain, version in sorted(opsets.items()):
        model.opset_import.add(domain=domain, version=version)
    model.doc_string = "Iris classifier (scikit-learn LogisticRegression), probabilities only"
    return model


def dims(value_info: Any) -> list[int | str]:
    """Shape of a graph input/output: ints for fixed dims, names for symbolic ones."""
    shape = value_info.type.tensor_type.shape.dim
    return [d.dim_param if d.dim_param else d.dim_value for d in shape]


def check_onnx(path: Path) -> None:
    """Run onnx.checker and verify the graph's interface."""
    onnx.checker.check_model(str(path), full_check=True)
    graph = onnx.load(str(path)).graph
    (inp,), (outp,) = graph.input, graph.output
    float_type = onnx.TensorProto.FLOAT
    assert inp.name == INPUT_NAME and inp.type.tensor_type.elem_type == float_type
    assert outp.name == OUTPUT_NAME and outp.type.tensor_type.elem_type == float_type
    assert dims(inp) == ["batch", len(FEATURES)], dims(inp)
    assert dims(outp) == ["batch", len(CLASSES)], dims(outp)
    print(f"graph: {[n.op_type for n in graph.node]}, {len(graph.initializer)} initializers")


def random_points(features: np.ndarray) -> np.ndarray:
    """Seeded uniform points over each feature's observed range, widened by 20%."""
    low, high = features.min(axis=0), features.max(axis=0)
    pad = 0.2 * (high - low)
    rng = np.random.default_rng(SEED)
    points = rng.uniform(low - pad, high + pad, size=(RANDOM_POINTS, len(FEATURES)))
    return points.astype(np.float32)


def compare(pipeline: Pipeline, session: ort.InferenceSession, batch: np.ndarray) -> float:
    """Max abs diff between onnxruntime and predict_proba on ``batch``; asserts bounds."""
    expected = pipeline.predict_proba(batch)
    (actual,) = session.run([OUTPUT_NAME], {INPUT_NAME: batch})
    assert actual.dtype == np.float32 and actual.shape == (len(batch), len(CLASSES))
    diff = float(np.max(np.abs(expected - actual)))
    assert diff < MAX_ABS_DIFF, f"onnxruntime differs from scikit-learn by {diff}"
    agree = np.argmax(actual, axis=1) == pipeline.predict(batch)
    assert agree.all(), f"argmax differs from predict on {np.flatnonzero(~agree)}"
    return diff


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="ONNX file to write")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point."""
    args = parse_args(argv)
    features, labels = load_data()
    pipeline = train(features, labels)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(convert(pipeline), str(args.out))
    check_onnx(args.out)

    session = ort.InferenceSession(str(args.out), providers=["CPUExecutionProvider"])
    print(
        "max |onnxruntime - predict_proba|, 150 iris rows:    "
        f"{compare(pipeline, session, features):.3g}"
    )
    print(
        f"max |onnxruntime - predict_proba|, {RANDOM_POINTS} random points: "
        f"{compare(pipeline, session, random_points(features)):.3g}"
    )
    examples = features[[0, 50, 100]]
    (probabilities,) = session.run([OUTPUT_NAME], {INPUT_NAME: examples})
    for row, probs in zip(examples, probabilities, strict=True):
        ranked = ", ".join(f"{name} {p:.4f}" for name, p in zip(CLASSES, probs, strict=True))
        print(f"  {np.round(row.astype(np.float64), 2).tolist()} -> {ranked}")
    print(f"wrote {args.out.name}: {args.out.stat().st_size} bytes, sha256 {sha256_of(args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
