"""model.json's ``signature``: a model's declared inputs and outputs, each a name, a dtype and a
shape (-1 for any length), checked as the model's kind requires."""
from __future__ import annotations

import re
from typing import Any

from chalicelib.registry.jobsblock import Fail
from chalicelib.registry.kinds import KindRules
from chalicelib.registry.specs import DType, Signature, TensorSpec


def read_signature(value: Any, kind: KindRules, fail: Fail) -> Signature:
    """model.json's ``signature`` (None when absent), as the kind requires it.

    Raises:
        ConfigurationError: (made by ``fail``) it is not a signature, or one the kind
            requires is missing or declares no input.
    """
    required = kind.signature_required
    if value is None:
        if required:
            raise fail("signature", f"is required by the {kind.name} pipeline")
        return Signature()
    if not isinstance(value, dict) or set(value) - {"inputs", "outputs"}:
        raise fail("signature", 'must be {"inputs": [...], "outputs": [...]}')
    inputs = _specs(value.get("inputs", []), "signature.inputs", fail)
    if required and not inputs:
        raise fail("signature.inputs", "must declare at least one input")
    return Signature(inputs, _specs(value.get("outputs", []), "signature.outputs", fail))


def _specs(value: Any, key: str, fail: Fail) -> tuple[TensorSpec, ...]:
    if not isinstance(value, list):
        raise fail(key, "must be a list of {\"name\", \"dtype\", \"shape\"}")
    specs = tuple(_spec(item, f"{key}[{index}]", fail) for index, item in enumerate(value))
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise fail(key, "declares a name twice")
    return specs


def _spec(item: Any, key: str, fail: Fail) -> TensorSpec:
    if not isinstance(item, dict) or set(item) != {"name", "dtype", "shape"}:
        raise fail(key, 'must be {"name": ..., "dtype": ..., "shape": [...]}')
    name, dtype, shape = item["name"], item["dtype"], item["shape"]
    if not isinstance(name, str) or not re.match(r"^[A-Za-z_][\w.:/-]{0,127}\Z", name):
        raise fail(key + ".name", f"must be a tensor name, not {name!r}")
    try:
        kind = DType(dtype)
    except ValueError:
        raise fail(key + ".dtype", f"must be one of {', '.join(DType)}") from None
    if not isinstance(shape, list) or not 1 <= len(shape) <= 8 or not all(
            isinstance(d, int) and not isinstance(d, bool) and (d == -1 or d >= 1)
            for d in shape):
        raise fail(key + ".shape", "must be a list of 1 to 8 sizes, -1 for any")
    return TensorSpec(name, kind, tuple(shape))
