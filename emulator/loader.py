"""Builds the runtime a configuration describes: each ONNX file loaded once per kind."""

from __future__ import annotations

import random
from pathlib import Path

from emulator import imaging
from emulator.config import LLM, TENSOR, ConfigError, EmulatorConfig, ModelSpec
from emulator.container import Container, ImageClassifier, SlowContainer
from emulator.language import LanguageContainer
from emulator.models import ModelLoadError, OnnxGraph, OnnxModel
from emulator.runtime import Runtime
from emulator.tensors import TensorContainer

Loaded = OnnxModel | OnnxGraph


def load_containers(config: EmulatorConfig) -> dict[str, Container]:
    """Loads every model of a configuration, sharing sessions between specs of one file.

    Args:
        config: the validated configuration.

    Returns:
        One container per key of ``config.models``: an image classifier, a TF Serving style
        tensor container for ``kind: tensor``, or an LMI container for ``kind: llm`` (its
        model is loaded on its first request, not here).

    Raises:
        ConfigError: a model file is missing or unusable, or does not fit its settings.
    """
    imaging.warm_up()
    sessions: dict[tuple[Path, int | None, str], Loaded] = {}
    containers: dict[str, Container] = {}
    for name, spec in config.models.items():
        if spec.kind == LLM and spec.llm is not None:
            containers[name] = LanguageContainer(name, spec.llm)
            continue
        assert spec.path is not None  # only an llm model may go without a file
        key = (spec.path.resolve(), spec.threads, spec.kind)
        if key not in sessions:
            sessions[key] = _load(spec)
        containers[name] = _container(spec, sessions[key])
    return containers


def _load(spec: ModelSpec) -> Loaded:
    kind = OnnxGraph if spec.kind == TENSOR else OnnxModel
    assert spec.path is not None
    try:
        return kind.load(spec.path, spec.threads)
    except ModelLoadError as error:
        raise ConfigError(f"models.{spec.name}.path: {error}") from error


def _container(spec: ModelSpec, model: Loaded) -> Container:
    container: Container
    if isinstance(model, OnnxGraph):
        container = TensorContainer(model, spec.max_instances)
    else:
        container = _image_classifier(spec, model)
    return SlowContainer(container, spec.delay_seconds) if spec.delay_seconds else container


def _image_classifier(spec: ModelSpec, model: OnnxModel) -> ImageClassifier:
    size = model.input_size()
    if size is not None and size != spec.preprocess.crop:
        raise ConfigError(
            f"models.{spec.name}.crop: {spec.preprocess.crop} but the model takes {size}x{size}"
        )
    classes = spec.classes if spec.classes is not None else model.classes()
    return ImageClassifier(model, spec.preprocess, classes)


def build_runtime(config: EmulatorConfig, seed: int | None = None) -> Runtime:
    """Loads the models and returns the runtime serving the configured endpoints.

    Args:
        config: the validated configuration.
        seed: overrides ``config.seed`` for the random source when not None.

    Returns:
        The runtime.

    Raises:
        ConfigError: a model cannot be loaded.
    """
    rng = random.Random(config.seed if seed is None else seed)
    return Runtime(config, load_containers(config), rng)
