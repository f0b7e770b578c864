"""Importing users' handler files: each once, at start-up, under its own module name; a file
that does not import or lacks a function stops start-up naming the file."""
from __future__ import annotations

import importlib.util
import inspect
import logging
import sys
import types
from collections.abc import Callable
from typing import Any

from chalicelib.core.errors import (
    ConfigurationError,
)
from chalicelib.registry.specs import ModelSpec

logger = logging.getLogger("sagegate.handlers")

MODULE_PREFIX = "sagegate_models"
"""User files are imported as ``sagegate_models.<model name, hyphens as _>.<file stem>``."""


def file_label(model: ModelSpec, filename: str) -> str:
    """How logs and errors name a model's file: ``models/<name>/<file>``."""
    return f"models/{model.name}/{filename}"


def import_user_file(model: ModelSpec, filename: str) -> types.ModuleType:
    """Import ``model.folder / filename`` under a module name of its own.

    The folder is not put on ``sys.path``; the file may read files beside it (``__file__``).

    Raises:
        ConfigurationError: the file is missing or raises on import (the message names the
            file and the error in one line; the traceback is logged).
    """
    where = file_label(model, filename)
    path = model.folder / filename
    if not path.is_file():
        raise ConfigurationError(f"{where} is missing")
    stem = filename.rsplit(".", 1)[0]
    name = f"{MODULE_PREFIX}.{model.name.replace('-', '_')}.{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigurationError(f"{where} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as import does: dataclasses, pickle and typing look there
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as error:
        sys.modules.pop(name, None)
        logger.exception("%s failed to import", where)
        # one line, without this machine's paths
        text = f"{type(error).__name__}: {error}"
        for folder in {str(model.folder.resolve()), str(model.folder)}:
            text = text.replace(folder, f"models/{model.name}")
        raise ConfigurationError(f"{where} failed to import: {text[:300]}") from None
    return module


def user_function(module: types.ModuleType, name: str, arguments: str, where: str
                  ) -> Callable[..., Any] | None:
    """``module.name`` if defined, checked to take ``arguments`` positionally; else None."""
    found = function_form(module, name, (arguments,), where)
    return found[0] if found else None


def function_form(module: types.ModuleType, name: str, forms: tuple[str, ...], where: str
                  ) -> tuple[Callable[..., Any], int] | None:
    """``module.name`` and how many arguments it takes: the first of ``forms`` (argument lists,
    most arguments first) its signature accepts positionally; None when it is not defined.

    Raises:
        ConfigurationError: it is not a function, or takes none of the forms.
    """
    function = getattr(module, name, None)
    if function is None:
        return None
    accepted = " or ".join(f"{name}({arguments})" for arguments in forms)
    if not callable(function):
        raise ConfigurationError(f"{where}: {name} must be a function {accepted}")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: trust the first form
        return function, forms[0].count(",") + 1
    for arguments in forms:
        try:
            signature.bind(*arguments.split(", "))
        except TypeError:
            continue
        return function, arguments.count(",") + 1
    counts = " or ".join(str(arguments.count(",") + 1) for arguments in forms)
    raise ConfigurationError(f"{where}: {name} must take {counts} positional arguments "
                             f"{accepted}, not {name}{signature}")


def _required(module: types.ModuleType, name: str, arguments: str, where: str
              ) -> Callable[..., Any]:
    function = user_function(module, name, arguments, where)
    if function is None:
        raise ConfigurationError(f"{where} defines no {name}({arguments})")
    return function
