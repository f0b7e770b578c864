"""What ``sagegate arm64-check`` runs inside the emulated arm64 CPython: the layer's own code.

Started by :mod:`sagegate.deploy.arm64` by its path, ``python3.13 -I -S -B arm64_probe.py LAYER
JPEG VOCAB OUT``, so it imports nothing of the project: ``sys.path`` gets the extracted layer
(``opt/python``) and nothing else beside the standard library. It imports every top-level package
the layer holds, then makes each compiled library do real work (a matrix product, a JPEG decoded
and resized, JSON and base64 round trips, a KLL sketch's quantile, the sentiment model's
tokenizer), and writes what it found to OUT as JSON. The host runs :func:`compute` with its own
libraries on the same inputs and compares.
"""
from __future__ import annotations

import importlib
import json
import os
import platform
import sys
from typing import Any

SKIPPED_SUFFIXES = (".dist-info", ".libs")


def top_level_names(directory: str) -> list[str]:
    """The importable top-level names of an installed tree: packages, modules, extensions."""
    names = set()
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if entry.startswith((".", "__")) or entry.endswith(SKIPPED_SUFFIXES) or entry == "bin":
            continue
        if os.path.isdir(path):
            if os.path.exists(os.path.join(path, "__init__.py")):
                names.add(entry)
        elif entry.endswith((".py", ".so")):
            names.add(entry.split(".", 1)[0])
    return sorted(names)


def compute(jpeg: bytes, vocab: str) -> dict[str, Any]:
    """Each compiled dependency doing real work; plain JSON values to compare across machines."""
    import cv2
    import numpy as np
    import orjson
    import pybase64
    from tokenizers import BertWordPieceTokenizer

    a = np.arange(48 * 48, dtype=np.float64).reshape(48, 48) % 7
    # qemu's emulation can leave stale floating-point status flags that numpy reports as
    # warnings after a BLAS call; the product itself is checked exactly below
    with np.errstate(all="ignore"):
        product = a @ a.T
    image = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError("OpenCV could not decode the sample JPEG")
    small = cv2.resize(image, (32, 24), interpolation=cv2.INTER_AREA)
    # fewer values than k: the sketch keeps them all (no randomized compaction), so any two
    # machines agree exactly
    # datasketches ships no type information
    sketch = importlib.import_module("datasketches").kll_floats_sketch(200)
    for value in range(1, 151):
        sketch.update(float(value))
    document = {"values": [1.5, 2, "three"], "nested": {"ok": True}}
    blob = bytes(range(256)) * 4
    tokenizer = BertWordPieceTokenizer(vocab, lowercase=True)
    return {
        "matmul_trace": float(np.trace(product)), "matmul_sum": float(product.sum()),
        "decoded_shape": list(image.shape), "resized": small.reshape(-1).tolist(),
        "kll_median": float(sketch.get_quantile(0.5)), "kll_n": int(sketch.n),
        "orjson": orjson.loads(orjson.dumps(document)) == document,
        "pybase64": pybase64.b64decode(pybase64.b64encode(blob)) == blob,
        "tokens": tokenizer.encode("Graviton runs the layer").ids,
    }


def main(layer: str, jpeg_path: str, vocab: str, out: str) -> None:
    sys.path.insert(0, layer)
    imported = {}
    for name in top_level_names(layer):
        module = importlib.import_module(name)
        imported[name] = getattr(module, "__file__", None) or ""
    with open(jpeg_path, "rb") as handle:
        jpeg = handle.read()
    report = {"machine": platform.machine(), "python": platform.python_version(),
              "imported": imported, "results": compute(jpeg, vocab)}
    with open(out, "w", encoding="utf-8") as handle:
        json.dump(report, handle)


if __name__ == "__main__":
    main(*sys.argv[1:5])
