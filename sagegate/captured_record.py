"""The record a Model Monitor record preprocessor receives, and the way the analyzer calls it.

The classes live in :mod:`chalicelib.monitor.preprocessing` (the scheduled monitor runs a
model's ``preprocessor.py`` in Lambda, where sagegate is not installed); ``sagegate capture``
and ``sagegate monitor`` import them from here, unchanged.
"""
from __future__ import annotations

from chalicelib.monitor.preprocessing import (
    LOGGER_NAME,
    SHADOW_SOURCE,
    CapturedData,
    EventData,
    EventMetadata,
    HandlerError,
    HandlerFailed,
    Preprocessor,
    is_cache_hit,
    is_shadow,
)

__all__ = ["LOGGER_NAME", "SHADOW_SOURCE", "CapturedData", "EventData", "EventMetadata",
           "HandlerError", "HandlerFailed", "Preprocessor", "is_cache_hit", "is_shadow"]
