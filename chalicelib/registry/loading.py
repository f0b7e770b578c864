"""The model registry: one folder per model under ``chalicelib/models/``, read at start-up.

A model is a folder ``chalicelib/models/<name>/`` (packaged with the function; the folder name
is the model's name) holding ``model.json`` and, as its pipeline needs, ``inference.py`` (the
SageMaker TF Serving container's handler contract), ``handler.py`` (Cortex's) and
``labels.txt`` (one class per line). ``model.json``::

    {"endpoint": "iris",                 # or "$IRIS_ENDPOINT": read from the stage's environment
     "pipeline": "tensor",               # a registered kind: image-classification | tensor |
                                         # sagemaker-tfs | cortex | llm (registry.kinds.KINDS)
     "content_type": "application/json", # sent to the endpoint
     "accept": "application/json",
     "signature": {"inputs": [{"name": "features", "dtype": "float32", "shape": [-1, 4]}],
                   "outputs": [{"name": "probabilities", "dtype": "float32", "shape": [-1, 3]}]},
     "target_model": null, "variant": null,    # SageMaker TargetModel / TargetVariant defaults
     "inference_component": null,         # InferenceComponentName (or "$VARIABLE")
     "metadata": {},                      # handed to Cortex handlers
     "default_k": 3,
     "cache": true,                       # false: never cache this model's answers
     "expose_handler_errors": false,      # true: a handler's exception type and message in 500s
     "image": {"resize_mode": "fill", "input_width": 299, ...},  # image-classification only
     "description": "...", "example": {...},   # shown by GET /models/{name}
     "jobs": {"backend": "async", "endpoint": "iris-async"},  # see registry.jobsblock
     "llm": {"schema": "lmi-chat", ...}}  # the llm pipeline only: see registry.llmblock

Every file is validated when the registry is built: an unknown or badly typed key, a missing
variable, a handler file the pipeline needs and lacks stop start-up with a
:class:`~chalicelib.core.errors.ConfigurationError` naming the file and the key.
"""
from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from chalicelib.core.config import Settings
from chalicelib.core.config_names import SAGEMAKER_NAME
from chalicelib.core.config_parsing import SettingError
from chalicelib.core.errors import ConfigurationError, ModelNotFoundError
from chalicelib.core.media import ENDPOINT_ANSWER_TYPES, MediaType
from chalicelib.registry import kinds as registered
from chalicelib.registry.experiments import read_experiment
from chalicelib.registry.jobsblock import read_jobs
from chalicelib.registry.kinds import BackendRules, KindRules
from chalicelib.registry.labels import read_labels
from chalicelib.registry.llmblock import read_llm
from chalicelib.registry.signatures import read_signature
from chalicelib.registry.specs import ModelSpec

MODELS_DIR = Path(__file__).resolve().parent.parent / "models"
MODEL_FILE = "model.json"
LABELS_FILE = "labels.txt"
DEFAULT_MODEL = "DEFAULT_MODEL"  # the variable naming the model /predict serves
DEFAULT_MODEL_NAME = "efficientnet-lite0"
_MODEL_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,62}[a-z0-9])?\Z")
_ENV_REFERENCE = re.compile(r"^\$([A-Z_][A-Z0-9_]*)\Z")
# SageMaker's InferenceComponentName: at most 63 characters of this pattern.
INFERENCE_COMPONENT = re.compile(r"^[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?\Z")
# Settings an image-classification model.json may give in "image" (the flat variables give the
# default model's).
IMAGE_KEYS = frozenset({"resize_mode", "resize_shorter_side", "input_width", "input_height",
                        "upscale", "encode_format", "jpeg_quality", "png_compression",
                        "passthrough"})


# The Settings fields an image model sets with top-level model.json keys.
_SETTINGS_KEYS = {"endpoint_content_type": "content_type", "endpoint_accept": "accept"}


class Registry:
    """Every model of a deployment, by name, and the default one."""

    def __init__(self, models: Mapping[str, ModelSpec], default: str) -> None:
        if default not in models:
            raise ConfigurationError(
                f"{DEFAULT_MODEL}={default!r} names no model; registered: {', '.join(models)}")
        self.models = dict(models)
        self.default = default

    def names(self) -> list[str]:
        return sorted(self.models)

    def get(self, name: str | None = None) -> ModelSpec:
        """The model called ``name`` (None: the default); ModelNotFoundError lists the known."""
        model = self.models.get(self.default if name is None else name)
        if model is None:
            shown = name if len(name or "") <= 64 else (name or "")[:64] + "..."
            raise ModelNotFoundError(
                f"No model {shown!r}; the models are: {', '.join(self.names())}.",
                details={"models": self.names()})
        return model


@dataclasses.dataclass(frozen=True)
class Registered:
    """The pipeline kinds and job backends a model.json may name."""

    kinds: Mapping[str, KindRules] = dataclasses.field(
        default_factory=lambda: registered.by_name(registered.KINDS))
    backends: Mapping[str, BackendRules] = dataclasses.field(
        default_factory=lambda: registered.by_name(registered.BACKENDS))

    @classmethod
    def of(cls, kinds: Sequence[KindRules] = registered.KINDS,
           backends: Sequence[BackendRules] = registered.BACKENDS) -> Registered:
        """These kinds and backends (ConfigurationError for a name registered twice)."""
        try:
            return cls(registered.by_name(kinds), registered.by_name(backends))
        except ValueError as error:
            raise ConfigurationError(f"pipeline kinds and job backends: {error}") from None


def load_registry(settings: Settings, env: Mapping[str, str], root: Path = MODELS_DIR,
                  labels: Sequence[str] | None = None,
                  known: Registered | None = None) -> Registry:
    """Read and validate every model folder under ``root``.

    Args:
        settings: the flat settings (they describe the default model, and any
            image-classification model's settings start from them).
        env: where ``$VAR`` endpoints are read from.
        labels: the flat ``LABELS`` file's classes, for image models without a labels.txt.

    Raises:
        ConfigurationError: a folder, file or key is not valid; the message names it.
    """
    if not root.is_dir():
        raise ConfigurationError(f"{root.name}/ is missing: no models are registered")
    models = {}
    for folder in sorted(path for path in root.iterdir() if path.is_dir()
                         and not path.name.startswith((".", "_"))):
        models[folder.name] = load_model(folder, settings, env, labels, known)
    default = env.get(DEFAULT_MODEL, "").strip() or DEFAULT_MODEL_NAME
    return Registry(models, default)


def load_model(folder: Path, settings: Settings, env: Mapping[str, str],
               flat_labels: Sequence[str] | None = None,
               known: Registered | None = None) -> ModelSpec:
    """Read one model folder (ConfigurationError naming the file and the key)."""
    where = f"models/{folder.name}/{MODEL_FILE}"
    if not _MODEL_NAME.match(folder.name):
        raise ConfigurationError(f"models/{folder.name}: a model's folder name is lower-case "
                                 "letters, digits and inner hyphens (it is the URL's name)")
    try:
        document = json.loads((folder / MODEL_FILE).read_text(encoding="utf-8"),
                              parse_constant=_not_json, object_pairs_hook=_unique_keys)
    except FileNotFoundError:
        raise ConfigurationError(f"{where} is missing") from None
    except (OSError, ValueError) as error:
        raise ConfigurationError(f"{where} is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise ConfigurationError(f"{where} must hold a JSON object")
    return _ModelReader(where, folder, document, settings, env, flat_labels,
                        known or Registered()).read()


def _not_json(constant: str) -> Any:
    """Python's json reads NaN and Infinity, which JSON has not (and no setting takes)."""
    raise ValueError(f"{constant} is not a JSON value")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object as JSON has it, refusing a key given twice (the last would win unseen)."""
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise ValueError(f"key {key!r} is given twice")
        document[key] = value
    return document


_KEYS = {"endpoint", "pipeline", "content_type", "accept", "signature", "target_model",
         "inference_component",
         "variant", "metadata", "default_k", "image", "description", "example", "cache",
         "expose_handler_errors", "jobs", "experiment", "llm"}


class _ModelReader:
    """Validates one model.json, key by key, naming the file and key on every failure."""

    def __init__(self, where: str, folder: Path, document: dict[str, Any], settings: Settings,
                 env: Mapping[str, str], flat_labels: Sequence[str] | None,
                 known: Registered) -> None:
        self.where = where
        self.known = known
        self.folder = folder
        self.doc = document
        self.settings = settings
        self.env = env
        self.flat_labels = flat_labels

    def fail(self, key: str, requirement: str) -> ConfigurationError:
        return ConfigurationError(f"{self.where}: key {key!r} {requirement}")

    def read(self) -> ModelSpec:
        unknown = sorted(set(self.doc) - _KEYS)
        if unknown:
            raise self.fail(unknown[0],
                            f"is not a model.json key (known: {', '.join(sorted(_KEYS))})")
        kind = self._kind()
        signature = read_signature(self.doc.get("signature"), kind, self.fail)
        labels = self._labels(kind.image)
        endpoint = self._endpoint()
        settings = self._image_settings(endpoint, kind)
        model = ModelSpec(
            name=self.folder.name, folder=self.folder, endpoint=endpoint, pipeline=kind.name,
            kind=kind,
            content_type=self._media_type("content_type", settings.endpoint_content_type
                                          if settings else MediaType.JSON),
            accept=self._media_type("accept", settings.endpoint_accept if settings
                                    else MediaType.JSON),
            signature=signature, target_model=self._optional_text("target_model"),
            variant=self._name("variant"), metadata=self._metadata(),
            default_k=self._default_k(settings), labels=labels, settings=settings,
            description=self._optional_text("description"), example=self.doc.get("example"),
            expose_handler_errors=self._flag("expose_handler_errors"),
            cache=self._cache(), inference_component=self._inference_component(),
            jobs=read_jobs(self.doc.get("jobs"), kind, self.known.backends, self.fail,
                           self._endpoint_value),
            experiment=read_experiment(self.doc.get("experiment"), self.fail,
                                       self._endpoint_value, self._name_value,
                                       self._component_value, self.folder.name),
            llm=read_llm(self.doc.get("llm"), kind, self.known.kinds, self.fail))
        if kind.content_type is not None and model.content_type != kind.content_type:
            raise self.fail("content_type", f"must be {kind.content_type} for the {kind.name} "
                            "pipeline (it sends that type)")
        handler = model.handler_file
        if handler is not None and not handler.is_file():
            raise self.fail("pipeline", f"is {kind.name!r}, which runs {handler.name}: "
                            f"models/{self.folder.name}/{handler.name} is missing")
        return model

    def _kind(self) -> KindRules:
        value = self.doc.get("pipeline")
        kind = self.known.kinds.get(value) if isinstance(value, str) else None
        if kind is None:
            raise self.fail("pipeline", f"must be one of {', '.join(self.known.kinds)}, not "
                            f"{value!r}")
        return kind

    def _endpoint(self) -> str:
        return self._endpoint_value("endpoint", self.doc.get("endpoint"))

    def _endpoint_value(self, key: str, value: Any) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, "must name the SageMaker endpoint (or \"$VARIABLE\")")
        reference = _ENV_REFERENCE.match(value)
        if reference:
            value = self.env.get(reference.group(1), "").strip()
            if not value:
                raise self.fail(key, f"reads ${reference.group(1)}, which is not set in "
                                "the stage's environment")
        if not SAGEMAKER_NAME.fullmatch(value):
            raise self.fail(key, f"must be a SageMaker endpoint name, not {value!r}")
        return value

    def _inference_component(self) -> str | None:
        return self._component_value("inference_component", self.doc.get("inference_component"))

    def _component_value(self, key: str, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise self.fail(key, "must name an inference component of the "
                            "endpoint (or \"$VARIABLE\"), or be null")
        reference = _ENV_REFERENCE.match(value)
        if reference:
            value = self.env.get(reference.group(1), "").strip()
            if not value:
                raise self.fail(key, f"reads ${reference.group(1)}, which is "
                                "not set in the stage's environment")
        if len(value) > 63 or not INFERENCE_COMPONENT.match(value):
            raise self.fail(key, "must be a SageMaker inference component "
                            f"name (1 to 63 letters, digits and inner hyphens), not {value!r}")
        return value

    def _media_type(self, key: str, default: str) -> str:
        value = self.doc.get(key, default)
        if not isinstance(value, str) or not re.match(r"^[\w.+-]+/[\w.+-]+\Z", value):
            raise self.fail(key, f"must be a media type, not {value!r}")
        if key == "accept" and not self._kind().image and value not in ENDPOINT_ANSWER_TYPES:
            raise self.fail(key, f"must be one of {', '.join(ENDPOINT_ANSWER_TYPES)}")
        return value

    def _optional_text(self, key: str) -> str | None:
        value = self.doc.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not value or len(value) > 1024:
            raise self.fail(key, "must be a string (at most 1024 characters) or null")
        return value

    def _name(self, key: str) -> str | None:
        return self._name_value(key, self._optional_text(key))

    def _name_value(self, key: str, value: Any) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str) or not SAGEMAKER_NAME.fullmatch(value):
            raise self.fail(key, f"must be a SageMaker name, not {value!r}")
        return value

    def _metadata(self) -> dict[str, Any]:
        value = self.doc.get("metadata", {})
        if not isinstance(value, dict):
            raise self.fail("metadata", "must be a JSON object")
        return value

    def _flag(self, key: str) -> bool:
        value = self.doc.get(key, False)
        if not isinstance(value, bool):
            raise self.fail(key, "must be true or false")
        return value

    def _cache(self) -> bool:
        value = self.doc.get("cache", True)
        if not isinstance(value, bool):
            raise self.fail("cache", "must be true or false")
        return value

    def _default_k(self, settings: Settings | None) -> int:
        value = self.doc.get("default_k", settings.default_k if settings else 5)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 100_000:
            raise self.fail("default_k", "must be a whole number from 1 to 100000")
        return value

    def _labels(self, image: bool) -> tuple[str, ...] | None:
        path = self.folder / LABELS_FILE
        if path.is_file():
            return read_labels(path, f"models/{self.folder.name}/{LABELS_FILE}")
        if image and self.flat_labels is not None:
            return tuple(self.flat_labels)
        return None

    def _image_settings(self, endpoint: str, kind: KindRules) -> Settings | None:
        if not kind.image:
            if "image" in self.doc:  # read by no other pipeline: it would be ignored unseen
                images = ", ".join(name for name, rules in self.known.kinds.items()
                                   if rules.image)
                raise self.fail("image", f"is for {images} models only, not {kind.name}")
            return None
        values = self._image_values()
        try:
            # Settings checks each value's type and range as it does the flat variables'
            return dataclasses.replace(self.settings, endpoint_name=endpoint, **values)
        except SettingError as error:
            field = error.variable.lower()
            if field in values:
                raise self.fail(_SETTINGS_KEYS.get(field, f"image.{field}"),
                                error.requirement) from None
            raise self.fail("image", str(error)) from None

    def _image_values(self) -> dict[str, Any]:
        """The Settings fields this image model sets: ``image``'s, and ``content_type`` and
        ``accept``, which the image pipeline sends from its settings."""
        value = self.doc.get("image", {})
        if not isinstance(value, dict):
            raise self.fail("image", f"must be an object of: {', '.join(sorted(IMAGE_KEYS))}")
        unknown = sorted(set(value) - IMAGE_KEYS)
        if unknown:
            raise self.fail(f"image.{unknown[0]}", "is not an image setting (known: "
                            f"{', '.join(sorted(IMAGE_KEYS))})")
        return {**value, **{field: self.doc[key] for field, key in _SETTINGS_KEYS.items()
                            if key in self.doc}}
