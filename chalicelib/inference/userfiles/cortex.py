"""Cortex's ONNX ``handler.py`` contract: ``pre_inference`` and ``post_inference`` in the forms
Cortex v0.6 to v0.11 ran."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from chalicelib.calls import Invoke
from chalicelib.core.errors import (
    ConfigurationError,
    HandlerError,
    SignatureMismatchError,
)
from chalicelib.inference import tensors
from chalicelib.inference.userfiles.failures import (
    HANDLER_FAILED,
    run_user_code,
    shape_of,
    wrong_return,
)
from chalicelib.inference.userfiles.importing import file_label, function_form, import_user_file
from chalicelib.registry.specs import DType, ModelSpec, TensorSpec

logger = logging.getLogger("sagegate.handlers")

FREE_AXIS = "N"
"""What a Cortex signature's shape shows for a free (-1) axis; ONNX shows a symbolic name."""


@dataclasses.dataclass(frozen=True)
class InputSignature:
    """One model input (or output) as Cortex's ONNX runtime shows it (onnxruntime's ``NodeArg``):
    ``name``, ``shape`` (a list; a free axis, -1 in ``model.json``, shows as ``"N"``) and
    ``type`` (``tensor(float)``...)."""

    name: str
    shape: list[int | str]
    type: str

    @classmethod
    def of(cls, spec: TensorSpec) -> InputSignature:
        return cls(spec.name, [FREE_AXIS if size == -1 else size for size in spec.shape],
                   spec.dtype.onnx_type)


@dataclasses.dataclass(frozen=True)
class CortexHandler:
    """A model's ``handler.py``, loaded (pipeline ``cortex``); a function the file lacks is
    None. ``pre_arguments``/``post_arguments`` is 3 (Cortex v0.10 to v0.11: ``(value,
    signature, metadata)``) or 2 (v0.6 to v0.9: ``(value, metadata)``, ``metadata`` then the
    signature)."""

    where: str
    pre_inference: Callable[..., Any] | None
    post_inference: Callable[..., Any] | None
    pre_arguments: int = 3
    post_arguments: int = 3

    @classmethod
    def load(cls, model: ModelSpec) -> CortexHandler:
        """Import and check ``models/<name>/handler.py``, reading each function's form.

        Raises:
            ConfigurationError: it does not import, defines neither function, one takes
                neither form's arguments, or the model declares no inputs.
        """
        where = file_label(model, "handler.py")
        if not model.signature.inputs:
            raise ConfigurationError(f"models/{model.name}/model.json: the cortex pipeline "
                                     "needs signature.inputs (the handler's signature)")
        module = import_user_file(model, "handler.py")
        pre = function_form(module, "pre_inference", ("sample, signature, metadata",
                                              "sample, metadata"), where)
        post = function_form(module, "post_inference", ("prediction, signature, metadata",
                                                "prediction, metadata"), where)
        if pre is None and post is None:
            raise ConfigurationError(
                f"{where} defines neither pre_inference(sample, signature, metadata) nor "
                "post_inference(prediction, signature, metadata)")
        return cls(where, pre[0] if pre else None, post[0] if post else None,
                   pre[1] if pre else 3, post[1] if post else 3)

    def __call__(self, sample: Any, invoke: Invoke, model: ModelSpec) -> Any:
        """One parsed request body through ``pre_inference``, the endpoint (TF Serving's REST
        body) and ``post_inference``; the result as plain JSON values.

        Raises:
            InvalidInputError: pre_inference raised ValueError / TypeError (its message).
            SignatureMismatchError: what pre_inference returned does not fit an input, or
                holds more than ``MAX_INSTANCES`` instances.
            HandlerError: the user's code failed or returned something unusable.
            SagegateError: the endpoint's errors, unchanged.
        """
        inputs = [InputSignature.of(spec) for spec in model.signature.inputs]
        outputs = [InputSignature.of(spec) for spec in model.signature.outputs]
        metadata = copy.deepcopy(dict(model.metadata))
        returned = sample
        if self.pre_inference is not None:
            returned = run_user_code(self.where, "pre_inference", self.pre_inference,
                                     *_arguments(sample, inputs, metadata, self.pre_arguments),
                                     refusal=lambda: True, expose=model.expose_handler_errors)
        arrays = self._arrays(returned, model)
        result = invoke(tensors.tfs_request(arrays, model.signature), model.content_type,
                        model.accept)
        returned = prediction = _prediction(result.body, model)
        if self.post_inference is not None:
            returned = run_user_code(self.where, "post_inference", self.post_inference,
                                     *_arguments(prediction, outputs, metadata,
                                                 self.post_arguments),
                                     expose=model.expose_handler_errors)
        try:
            document = tensors.to_json(returned)
            json.dumps(document, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            raise wrong_return(self.where, "post_inference", returned,
                                "JSON values (numpy arrays and scalars allowed)") from None
        return document

    def _arrays(self, returned: Any, model: ModelSpec) -> dict[str, np.ndarray]:
        """pre_inference's result as one array per input: a dict by input name, or a bare
        list / array for a single-input model; with or without the batch axis."""
        inputs = model.signature.inputs
        if isinstance(returned, (list, tuple, np.ndarray)) and len(inputs) == 1:
            returned = {inputs[0].name: returned}
        names = [spec.name for spec in inputs]
        if not isinstance(returned, dict) or sorted(map(str, returned)) != sorted(names):
            if self.pre_inference is None:  # the client's body goes to the model as it came
                raise SignatureMismatchError(f"The body must be an object of the inputs {names}"
                                             f"{' or a list' if len(inputs) == 1 else ''}.")
            keys = f" with the keys {sorted(map(str, returned))[:10]}" \
                if isinstance(returned, dict) else ""
            logger.error("%s: pre_inference returned %s%s; it must return a dict of the inputs "
                         "%s%s", self.where, shape_of(returned), keys, names,
                         " or a list for the single input" if len(inputs) == 1 else "")
            raise HandlerError(HANDLER_FAILED, details={"function": "pre_inference"})
        try:  # coerce refuses more than MAX_INSTANCES rows, as for the tensor pipeline
            return {spec.name: tensors.coerce(spec, _plain(returned[spec.name]))
                    for spec in inputs}
        except RecursionError:
            raise SignatureMismatchError("The model's inputs are nested too deeply.") from None


def _arguments(value: Any, signature: list[InputSignature], metadata: dict[str, Any],
               count: int) -> tuple[Any, ...]:
    """A Cortex function's arguments in its form: v0.10's ``(value, signature, metadata)`` or
    v0.6's ``(value, metadata)``, whose ``metadata`` was the signature."""
    return (value, signature, metadata) if count == 3 else (value, signature)


def _plain(value: Any) -> Any:
    """Lists of numpy scalars as plain lists (coerce reads Python numbers)."""
    if isinstance(value, np.ndarray):
        return value
    return tensors.to_json(list(value) if isinstance(value, tuple) else value)


def _prediction(body: bytes, model: ModelSpec) -> list[np.ndarray]:
    """The endpoint's TF Serving answer as onnxruntime's ``session.run()`` result: one array
    per output with the batch axis, in the declared dtype."""
    outputs = tensors.tfs_outputs(body, model.signature)
    specs = model.signature.outputs
    if len(specs) != len(outputs):
        return outputs
    typed = []
    for spec, array in zip(specs, outputs, strict=True):
        if spec.dtype != DType.STRING and array.dtype.kind in "biuf":
            with contextlib.suppress(TypeError, ValueError, OverflowError):
                array = array.astype(np.dtype(str(spec.dtype)))
        typed.append(array)
    return typed
