"""Which arm of an experiment serves a request.

With a sticky key (the authenticated caller, or a header's value) the choice is weighted
rendezvous hashing (highest random weight): each arm scores ``weight / -ln(h)``, ``h`` a uniform
hash of the model, the experiment, the arm and the key, and the highest score wins. A caller
keeps their arm across requests and functions with no table; changing one arm's weight moves
only callers to or from that arm, and adding an arm takes callers only from the others, in
proportion. Without a key (``sticky: none``, or a request that has none) each request draws.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import random
from collections.abc import Callable, Mapping

from chalicelib.calls import ModelRequest
from chalicelib.registry.experiments import Arm, Experiment, Shadow, Sticky, Target
from chalicelib.registry.specs import ModelSpec


def unit_hash(*parts: str) -> float:
    """A uniform number in (0, 1) from ``parts`` (SHA-256; the same everywhere, always)."""
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).digest()
    return (int.from_bytes(digest[:8], "big") + 0.5) / 2.0 ** 64


@dataclasses.dataclass(frozen=True)
class Routing:
    """One request's routing, decided once: its arm and the shadows that get a copy."""

    arm: Arm
    shadows: tuple[Shadow, ...]


def decide(experiment: Experiment, model: str, request_id: str, *,
           caller: Callable[[], str | None], headers: Mapping[str, str],
           header: str | None = None, rng: Callable[[], float] = random.random) -> Routing:
    """A request's routing: its arm (:func:`choose`, by its sticky key: the authenticated
    ``caller()``, asked only for ``sticky: caller``, else the value of ``header``, the
    experiment's sticky header lower-cased, in the request's ``headers``; none: a draw) and
    its sampled shadows (:func:`sampled`, by its request id)."""
    if experiment.sticky == Sticky.CALLER:
        key = caller()
    else:
        key = headers.get(header) or None if header is not None else None
    return Routing(choose(experiment, model, key, rng),
                   tuple([shadow for shadow in experiment.shadows
                          if sampled(model, shadow.name, request_id, shadow.sample)]))


def choose(experiment: Experiment, model: str, key: str | None,
           rng: Callable[[], float] = random.random) -> Arm:
    """The arm that serves a request whose sticky key is ``key`` (None: a draw)."""
    if key is None or experiment.sticky == Sticky.NONE:
        point = rng() * sum([arm.weight for arm in experiment.arms])
        for arm in experiment.arms:
            point -= arm.weight
            if point < 0:
                return arm
        return experiment.arms[-1]
    chosen, best = experiment.arms[0], -math.inf
    for arm in experiment.arms:  # the first of the highest scores, as max() picks
        score = arm.weight / -math.log(unit_hash(model, experiment.name, arm.name, key))
        if score > best:
            chosen, best = arm, score
    return chosen


def sampled(model: str, shadow: str, inference_id: str, share: float) -> bool:
    """Whether a request (by its inference id) gets a copy for ``shadow`` (a share of them)."""
    return share >= 1.0 or unit_hash(model, shadow, inference_id) < share


def on_target(model: ModelSpec, target: Target) -> ModelSpec:
    """``model`` served by an arm's or a shadow's endpoint and its own variant, target model
    and inference component; the model's own defaults for these apply only on the model's
    endpoint (a variant of one endpoint means nothing on another)."""
    own = target.endpoint == model.endpoint
    return dataclasses.replace(
        model, endpoint=target.endpoint,
        variant=target.variant or (model.variant if own else None),
        target_model=target.target_model or (model.target_model if own else None),
        inference_component=target.inference_component
        or (model.inference_component if own else None))


def unrouted(model: ModelSpec) -> ModelSpec:
    """``model`` without its routing defaults (variant, target model, inference component):
    what an experiment model's request is read with, so that its options hold only what the
    client named, and each target adds its own (:func:`routed`)."""
    return dataclasses.replace(model, variant=None, target_model=None,
                               inference_component=None)


def routed(request: ModelRequest, target: ModelSpec, *, client: bool = True) -> ModelRequest:
    """``request`` addressed to ``target``: the routing the client named (with ``client``;
    a shadow's copy drops it, being another model), else the target's own."""
    options = request.options
    if not client:
        options = dataclasses.replace(options, variant=None, target_model=None,
                                      inference_component=None)
    return dataclasses.replace(request, options=dataclasses.replace(
        options, variant=options.variant or target.variant,
        target_model=options.target_model or target.target_model,
        inference_component=options.inference_component or target.inference_component))
