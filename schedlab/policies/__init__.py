"""One registry of named policies. `make_policy(name)` gives a fresh (stateful) instance."""

from __future__ import annotations

from collections.abc import Callable

from schedlab.errors import ConfigError
from schedlab.policies.base import Policy
from schedlab.policies.baselines import FifoPolicy, OptimusPolicy, TiresiasPolicy
from schedlab.policies.goodput import PolluxPolicy, SiaPolicy
from schedlab.policies.ones import OnesPolicy

POLICIES: dict[str, Callable[[], Policy]] = {
    cls.name: cls for cls in (PolluxPolicy, SiaPolicy, TiresiasPolicy, OptimusPolicy, FifoPolicy, OnesPolicy)
}


def make_policy(name: str) -> Policy:
    if name not in POLICIES:
        raise ConfigError(f"unknown policy {name!r}; use one of {', '.join(sorted(POLICIES))}")
    return POLICIES[name]()


__all__ = ["POLICIES", "Policy", "make_policy"]
