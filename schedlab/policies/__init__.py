"""One registry of named policies. `make_policy(name)` gives a fresh (stateful) instance.

POLICIES holds the single policies: the allocation policies (ALLOCATORS: which jobs run, on how
many GPUs, at what batch) and the placement policies (PLACERS: PAL's queue, then concrete GPUs;
policies.placement). A name ALLOC+PLACE, ALLOC an allocation policy and PLACE a placement
policy, is their composition (policies.compose), e.g. "tiresias+pal".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from schedlab.errors import ConfigError
from schedlab.policies.base import Policy
from schedlab.policies.baselines import FifoPolicy, OptimusPolicy, TiresiasPolicy
from schedlab.policies.compose import SEPARATOR, Composition
from schedlab.policies.gavel import GavelFtfPolicy, GavelLasAgnosticPolicy, GavelLasPolicy, GavelMakespanPolicy
from schedlab.policies.goodput import IceFrogPolicy, JointPolicy, PolluxPolicy, SiaPolicy, StaticFreezePolicy
from schedlab.policies.ones import OnesPolicy
from schedlab.policies.placement import (
    MilpCpsatPolicy,
    MilpPolicy,
    PackedNonstickyPolicy,
    PackedStickyPolicy,
    PalPolicy,
    PlacementPolicy,
    PmFirstPolicy,
    RandomPlacementPolicy,
)

ALLOCATORS: dict[str, Callable[[], Policy]] = {
    cls.name: cls for cls in (PolluxPolicy, SiaPolicy, JointPolicy, IceFrogPolicy, StaticFreezePolicy, TiresiasPolicy,
                              OptimusPolicy, FifoPolicy, OnesPolicy, GavelLasPolicy, GavelLasAgnosticPolicy,
                              GavelMakespanPolicy, GavelFtfPolicy)
}
PLACERS: dict[str, Callable[[], PlacementPolicy]] = {
    cls.name: cls for cls in (PalPolicy, PmFirstPolicy, PackedStickyPolicy, PackedNonstickyPolicy,
                              RandomPlacementPolicy, MilpPolicy, MilpCpsatPolicy)
}
POLICIES: dict[str, Callable[[], Policy]] = {**ALLOCATORS, **PLACERS}


def policy_names() -> list[str]:
    """Every name make_policy takes: the single policies, then every composition ALLOC+PLACE."""
    return sorted(POLICIES) + [f"{a}{SEPARATOR}{p}" for a in sorted(ALLOCATORS) for p in sorted(PLACERS)]


def make_policy(name: str, params: Mapping[str, Any] | None = None) -> Policy:
    """A fresh policy; `params` override its fields, a table of values overriding the fields
    of a nested dataclass (e.g. {"seed": 3, "config": {"generations": 20}} for ones). A
    composition takes {"alloc": {...}, "place": {...}}."""
    alloc, separator, place = name.partition(SEPARATOR)
    if separator:
        policy: Policy = Composition(_fresh(alloc, ALLOCATORS, name), _fresh(place, PLACERS, name))
    else:
        policy = _fresh(name, POLICIES, name)
    return _override(policy, dict(params), name) if params else policy


def _fresh(key: str, registry: Mapping[str, Callable[[], Any]], name: str) -> Any:
    if key not in registry:
        raise ConfigError(f"unknown policy {name!r}; use one of {', '.join(sorted(POLICIES))}, or "
                          f"ALLOC{SEPARATOR}PLACE with ALLOC one of {', '.join(sorted(ALLOCATORS))} and PLACE one "
                          f"of {', '.join(sorted(PLACERS))}")
    return registry[key]()


def _override(obj: Any, params: dict[str, Any], where: str) -> Any:
    fields = {f.name for f in dataclasses.fields(obj) if f.init}
    unknown = sorted(set(params) - fields)
    if unknown:
        raise ConfigError(f"{where}: unknown parameter {unknown[0]!r}; use one of {', '.join(sorted(fields))}")
    updates = {}
    for key, value in params.items():
        current = getattr(obj, key)
        if isinstance(value, Mapping) and dataclasses.is_dataclass(current):
            value = _override(current, dict(value), f"{where}.{key}")
        updates[key] = value
    try:
        return dataclasses.replace(obj, **updates)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


__all__ = ["ALLOCATORS", "PLACERS", "POLICIES", "Policy", "make_policy", "policy_names"]
