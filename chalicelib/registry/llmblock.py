"""model.json's ``llm`` block: a language model's container schema, limits and defaults
(:class:`~.specs.LlmSpec`), required by the ``llm`` kind and refused by every other::

    "llm": {"schema": "lmi" | "lmi-chat" | "tgi" | "openai",
            "limits": {"max_prompt_bytes": 32768, "max_tokens": 2048},
            "defaults": {"max_tokens": 256, "temperature": 1.0},
            "budgets": {"tokens_per_minute": 0, "tokens_per_day": 0, "template_tokens": 0}}

``budgets``: each API key's tokens on this model (0: none), counted where the stage has a
``TOKEN_BUDGET_TABLE`` (:mod:`chalicelib.llm.budgets`), besides the stage's own budgets;
``template_tokens``, the tokens the container's chat template adds to a chat beyond its
messages (a default system prompt), reserved with each chat request in every window.

Read at start-up without the kind's code, as every block is: an unknown key, a value of the
wrong type or out of range, a default over its ceiling stop start-up naming the key.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.core.config import BUDGET_LIMITS, MAX_BUDGET_TOKENS
from chalicelib.core.errors import ConfigurationError
from chalicelib.registry.kinds import KindRules
from chalicelib.registry.specs import LlmSchema, LlmSpec

LLM_KEYS = frozenset({"schema", "limits", "defaults", "budgets"})
LIMIT_KEYS = frozenset({"max_prompt_bytes", "max_tokens"})
DEFAULT_KEYS = frozenset({"max_tokens", "temperature"})
TEMPLATE_TOKENS = "template_tokens"
BUDGET_KEYS = frozenset({*BUDGET_LIMITS, TEMPLATE_TOKENS})
MAX_PROMPT_BYTES = 6 * 1024 * 1024  # InvokeEndpoint's body limit
MAX_TOKENS = 1_000_000

Fail = Callable[[str, str], ConfigurationError]  # fail(key, requirement)


def read_llm(value: Any, kind: KindRules, kinds: Mapping[str, KindRules],
             fail: Fail) -> LlmSpec | None:
    """The model's ``llm`` block (None for a kind that reads none); a bad one is ``fail``'s
    ConfigurationError."""
    if not kind.llm:
        if value is not None:
            llms = ", ".join(name for name, rules in kinds.items() if rules.llm)
            raise fail("llm", f"is for {llms} models only, not {kind.name}")
        return None
    if not isinstance(value, dict):
        raise fail("llm", f"must be an object of: {', '.join(sorted(LLM_KEYS))} (the "
                   f"{kind.name} pipeline needs at least its schema)")
    _known(value, LLM_KEYS, "llm", fail)
    schema = value.get("schema")
    if not isinstance(schema, str) or schema not in set(LlmSchema):
        raise fail("llm.schema", f"must be one of {', '.join(LlmSchema)}, not {schema!r}")
    limits = _block(value, "limits", LIMIT_KEYS, fail)
    defaults = _block(value, "defaults", DEFAULT_KEYS, fail)
    budgets = _block(value, "budgets", BUDGET_KEYS, fail)
    ceiling = _whole(limits, "limits.max_tokens", LlmSpec.max_tokens_ceiling, MAX_TOKENS, fail)
    return LlmSpec(
        schema=LlmSchema(schema),
        max_prompt_bytes=_whole(limits, "limits.max_prompt_bytes", LlmSpec.max_prompt_bytes,
                                MAX_PROMPT_BYTES, fail),
        max_tokens_ceiling=ceiling,
        max_tokens=_whole(defaults, "defaults.max_tokens", min(LlmSpec.max_tokens, ceiling),
                          ceiling, fail),
        temperature=_temperature(defaults, fail),
        tokens_per_minute=_budget(budgets, "budgets.tokens_per_minute", fail),
        tokens_per_day=_budget(budgets, "budgets.tokens_per_day", fail),
        template_tokens=_budget(budgets, f"budgets.{TEMPLATE_TOKENS}", fail, MAX_TOKENS))


def _known(block: Mapping[str, Any], keys: frozenset[str], where: str, fail: Fail) -> None:
    unknown = sorted(set(block) - keys)
    if unknown:
        raise fail(f"{where}.{unknown[0]}", f"is not an {where} key (known: "
                   f"{', '.join(sorted(keys))})")


def _block(value: Mapping[str, Any], name: str, keys: frozenset[str],
           fail: Fail) -> dict[str, Any]:
    block = value.get(name, {})
    if not isinstance(block, dict):
        raise fail(f"llm.{name}", f"must be an object of: {', '.join(sorted(keys))}")
    _known(block, keys, f"llm.{name}", fail)
    return {f"{name}.{key}": item for key, item in block.items()}


def _whole(block: Mapping[str, Any], key: str, default: int, maximum: int, fail: Fail) -> int:
    value = block.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise fail(f"llm.{key}", f"must be a whole number from 1 to {maximum}, not {value!r}")
    return value


def _budget(block: Mapping[str, Any], key: str, fail: Fail,
            maximum: int = MAX_BUDGET_TOKENS) -> int:
    value = block.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise fail(f"llm.{key}", f"must be a whole number from 0 (none) to {maximum}, "
                   f"not {value!r}")
    return value


def _temperature(block: Mapping[str, Any], fail: Fail) -> float:
    value = block.get("defaults.temperature", LlmSpec.temperature)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 2:
        raise fail("llm.defaults.temperature", f"must be a number from 0 to 2, not {value!r}")
    return float(value)
