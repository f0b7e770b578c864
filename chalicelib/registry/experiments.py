"""model.json's ``experiment`` block: a model tried on live traffic across endpoints::

    "experiment": {"name": "lite0-int8",
                   "arms": [{"name": "a", "endpoint": "efficientnet-lite0", "weight": 90},
                            {"name": "b", "endpoint": "efficientnet-lite0-int8", "weight": 10}],
                   "sticky": "caller" | "header:<Name>" | "none",
                   "shadow": [{"name": "s", "endpoint": "...", "sample": 0.2,
                               "timeout_seconds": 5}]}

Each request is served by one arm (its endpoint, and the arm's ``variant``, ``target_model`` or
``inference_component`` if it names one); a shadow gets a sampled copy after the caller's answer
is sent. Checked at start-up as every model.json key is: one line naming the key.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from chalicelib.core.errors import ConfigurationError

EXPERIMENT_KEYS = frozenset({"name", "arms", "sticky", "shadow"})
ARM_KEYS = frozenset({"name", "endpoint", "weight", "variant", "target_model",
                      "inference_component"})
SHADOW_KEYS = frozenset({"name", "endpoint", "sample", "timeout_seconds", "variant",
                         "target_model", "inference_component"})
MAX_WEIGHT = 1_000_000
MAX_SHADOW_TIMEOUT_SECONDS = 60.0  # SageMaker's own InvokeEndpoint limit
DEFAULT_SHADOW_TIMEOUT_SECONDS = 5.0
_ARM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}\Z")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}\Z")  # an HTTP token


class Sticky:
    """How a caller keeps their arm: ``caller`` (the authenticated caller), ``header:<Name>``
    (that header's value) or ``none`` (a draw per request)."""

    CALLER = "caller"
    NONE = "none"
    HEADER = "header:"


@dataclasses.dataclass(frozen=True)
class Target:
    """Where an arm's or a shadow's calls go."""

    name: str
    endpoint: str
    variant: str | None = None
    target_model: str | None = None
    inference_component: str | None = None

    def route(self) -> tuple[str, str | None, str | None, str | None]:
        """What makes two targets the same model."""
        return self.endpoint, self.variant, self.target_model, self.inference_component

    def to_dict(self) -> dict[str, Any]:
        return {key: value for key, value in dataclasses.asdict(self).items()
                if value is not None}


@dataclasses.dataclass(frozen=True)
class Arm(Target):
    """One arm: a share of the traffic (``weight``, relative to the others')."""

    weight: int = 1


@dataclasses.dataclass(frozen=True)
class Shadow(Target):
    """One shadow: a copy of ``sample`` of the requests, sent after the answer, bounded by
    ``timeout_seconds``; its answer is captured, never returned."""

    sample: float = 1.0
    timeout_seconds: float = DEFAULT_SHADOW_TIMEOUT_SECONDS


@dataclasses.dataclass(frozen=True)
class Experiment:

    name: str
    arms: tuple[Arm, ...]
    sticky: str = Sticky.CALLER
    shadows: tuple[Shadow, ...] = ()

    @property
    def sticky_header(self) -> str | None:
        """The header whose value keeps a caller's arm (``header:<Name>``), lower-cased."""
        if self.sticky.startswith(Sticky.HEADER):
            return self.sticky[len(Sticky.HEADER):].lower()
        return None

    def to_dict(self) -> dict[str, Any]:
        total = sum(arm.weight for arm in self.arms)
        return {"name": self.name, "sticky": self.sticky,
                "arms": [{**arm.to_dict(), "share": round(arm.weight / total, 6)}
                         for arm in self.arms],
                "shadow": [shadow.to_dict() for shadow in self.shadows]}


Fail = Callable[[str, str], ConfigurationError]  # fail(key, requirement)
ResolveEndpoint = Callable[[str, Any], str]  # resolve(key, value), "$VARIABLE" read
CheckName = Callable[[str, Any], str | None]  # check(key, value) of a SageMaker name


def read_experiment(value: Any, fail: Fail, resolve_endpoint: ResolveEndpoint,
                    check_name: CheckName, check_component: CheckName,
                    model: str) -> Experiment | None:
    """The model's experiment from its ``experiment`` value (None when the key is absent); a
    ``ConfigurationError`` (made by ``fail``) also for a name given twice or a shadow that is
    one of the arms."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise fail("experiment", f"must be an object of: {', '.join(sorted(EXPERIMENT_KEYS))}")
    _known(value, EXPERIMENT_KEYS, "experiment", fail)
    name = value.get("name", model)
    if not isinstance(name, str) or not _ARM_NAME.match(name):
        raise fail("experiment.name", "must be a name: letters, digits, - and _ (63 at most)")
    arms_value = value.get("arms")
    if not isinstance(arms_value, list) or not arms_value:
        raise fail("experiment.arms", "must be a list of at least one arm "
                   '({"name", "endpoint", "weight"})')
    arms = tuple(_arm(item, f"experiment.arms[{index}]", fail, resolve_endpoint, check_name,
                      check_component) for index, item in enumerate(arms_value))
    shadow_value = value.get("shadow", [])
    if not isinstance(shadow_value, list):
        raise fail("experiment.shadow", "must be a list of shadows "
                   '({"name", "endpoint", "sample", "timeout_seconds"})')
    shadows = tuple(_shadow(item, f"experiment.shadow[{index}]", fail, resolve_endpoint,
                            check_name, check_component)
                    for index, item in enumerate(shadow_value))
    names = [target.name for target in (*arms, *shadows)]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise fail("experiment", f"names {twice[0]!r} twice (arm and shadow names are one set)")
    routes = {arm.route(): arm.name for arm in arms}
    for index, shadow in enumerate(shadows):
        if shadow.route() in routes:
            raise fail(f"experiment.shadow[{index}]", f"is arm {routes[shadow.route()]!r} "
                       "again: a shadow is another model than every arm")
    return Experiment(name, arms, _sticky(value.get("sticky", Sticky.CALLER), fail), shadows)


def _known(value: dict[str, Any], keys: frozenset[str], where: str, fail: Fail) -> None:
    unknown = sorted(set(value) - keys)
    if unknown:
        raise fail(f"{where}.{unknown[0]}", f"is not a key here (known: {', '.join(sorted(keys))})")


def _target(item: Any, where: str, keys: frozenset[str], fail: Fail,
            resolve_endpoint: ResolveEndpoint, check_name: CheckName,
            check_component: CheckName) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise fail(where, f"must be an object of: {', '.join(sorted(keys))}")
    _known(item, keys, where, fail)
    name = item.get("name")
    if not isinstance(name, str) or not _ARM_NAME.match(name):
        raise fail(f"{where}.name", "must be a name: letters, digits, - and _ (63 at most)")
    return {"name": name, "endpoint": resolve_endpoint(f"{where}.endpoint", item.get("endpoint")),
            "variant": check_name(f"{where}.variant", item.get("variant")),
            "target_model": _text(item.get("target_model"), f"{where}.target_model", fail),
            "inference_component": check_component(f"{where}.inference_component",
                                                   item.get("inference_component"))}


def _arm(item: Any, where: str, fail: Fail, resolve_endpoint: ResolveEndpoint,
         check_name: CheckName, check_component: CheckName) -> Arm:
    fields = _target(item, where, ARM_KEYS, fail, resolve_endpoint, check_name, check_component)
    weight = item.get("weight")
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
        raise fail(f"{where}.weight", f"must be a whole number from 1 to {MAX_WEIGHT}")
    return Arm(**fields, weight=weight)


def _shadow(item: Any, where: str, fail: Fail, resolve_endpoint: ResolveEndpoint,
            check_name: CheckName, check_component: CheckName) -> Shadow:
    fields = _target(item, where, SHADOW_KEYS, fail, resolve_endpoint, check_name,
                     check_component)
    sample = item.get("sample", 1.0)
    if isinstance(sample, bool) or not isinstance(sample, (int, float)) or not 0 < sample <= 1:
        raise fail(f"{where}.sample", "must be a share of the requests, above 0 and at most 1")
    timeout = item.get("timeout_seconds", DEFAULT_SHADOW_TIMEOUT_SECONDS)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) \
            or not 0 < timeout <= MAX_SHADOW_TIMEOUT_SECONDS:
        raise fail(f"{where}.timeout_seconds", "must be seconds above 0 and at most "
                   f"{MAX_SHADOW_TIMEOUT_SECONDS:g}")
    return Shadow(**fields, sample=float(sample), timeout_seconds=float(timeout))


def _sticky(value: Any, fail: Fail) -> str:
    if value in (Sticky.CALLER, Sticky.NONE):
        return str(value)
    if isinstance(value, str) and value.startswith(Sticky.HEADER) \
            and _HEADER_NAME.match(value[len(Sticky.HEADER):]):
        return value
    raise fail("experiment.sticky", f"must be {Sticky.CALLER!r}, {Sticky.NONE!r} or "
               f"'header:<Name>' (an HTTP header name), not {value!r}")


def _text(value: Any, key: str, fail: Fail) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > 1024:
        raise fail(key, "must be a string (at most 1024 characters) or null")
    return value
