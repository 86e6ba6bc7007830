"""One registry of named policies. `make_policy(name)` gives a fresh (stateful) instance."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from schedlab.errors import ConfigError
from schedlab.policies.base import Policy
from schedlab.policies.baselines import FifoPolicy, OptimusPolicy, TiresiasPolicy
from schedlab.policies.goodput import IceFrogPolicy, PolluxPolicy, SiaPolicy, StaticFreezePolicy
from schedlab.policies.ones import OnesPolicy

POLICIES: dict[str, Callable[[], Policy]] = {
    cls.name: cls for cls in (PolluxPolicy, SiaPolicy, IceFrogPolicy, StaticFreezePolicy, TiresiasPolicy,
                              OptimusPolicy, FifoPolicy, OnesPolicy)
}


def make_policy(name: str, params: Mapping[str, Any] | None = None) -> Policy:
    """A fresh policy; `params` override its fields, a table of values overriding the fields
    of a nested dataclass (e.g. {"seed": 3, "config": {"generations": 20}} for ones)."""
    if name not in POLICIES:
        raise ConfigError(f"unknown policy {name!r}; use one of {', '.join(sorted(POLICIES))}")
    policy = POLICIES[name]()
    return _override(policy, dict(params or {}), name) if params else policy


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


__all__ = ["POLICIES", "Policy", "make_policy"]
