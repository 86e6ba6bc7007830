"""schedlab: every round of a deep-learning GPU-cluster scheduler as an optimization model.

The round's entry points load on first use (PEP 562), so `import schedlab` and `schedlab --help`
cost no solver, no model library and no table. So does the replay's: `schedlab.replay(trace,
policy, world=..., **options)` (schedlab.replay_api.replay).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from schedlab.errors import InputError, SchedlabError, SolverError, VerificationError
from schedlab.state import (
    BatchLimits,
    Cluster,
    GpuRef,
    GradStats,
    JobAllocation,
    JobSpec,
    Node,
    RoundInput,
    RoundResult,
    Settings,
    ThroughputParams,
)

if TYPE_CHECKING:
    from schedlab.api import build_model, solve_round
    from schedlab.formulations import FORMULATIONS
    from schedlab.io import parse_round_input, round_input_to_dict, round_result_to_dict
    from schedlab.replay_api import replay
    from schedlab.solvers.registry import SOLVERS

__version__ = "0.1.0"
_LAZY = {"solve_round": "schedlab.api", "build_model": "schedlab.api", "FORMULATIONS": "schedlab.formulations",
         "SOLVERS": "schedlab.solvers.registry",
         "parse_round_input": "schedlab.io", "round_input_to_dict": "schedlab.io", "round_result_to_dict": "schedlab.io",
         "replay": "schedlab.replay_api"}
__all__ = [
    "solve_round", "build_model", "replay", "SOLVERS", "FORMULATIONS", "parse_round_input", "round_input_to_dict",
    "round_result_to_dict",
    "SchedlabError", "InputError", "SolverError", "VerificationError",
    "BatchLimits", "Cluster", "GpuRef", "GradStats", "JobAllocation", "JobSpec", "Node", "RoundInput",
    "RoundResult", "Settings", "ThroughputParams",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'schedlab' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
