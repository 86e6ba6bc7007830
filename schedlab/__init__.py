"""schedlab: every round of a deep-learning GPU-cluster scheduler as an optimization model."""

from schedlab.api import solve_round
from schedlab.formulations import FORMULATIONS
from schedlab.solvers.registry import SOLVERS
from schedlab.errors import InputError, SchedlabError, SolverError, VerificationError
from schedlab.io import parse_round_input, round_input_to_dict, round_result_to_dict
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

__version__ = "0.1.0"
__all__ = [
    "solve_round", "SOLVERS", "FORMULATIONS", "parse_round_input", "round_input_to_dict", "round_result_to_dict",
    "SchedlabError", "InputError", "SolverError", "VerificationError",
    "BatchLimits", "Cluster", "GpuRef", "GradStats", "JobAllocation", "JobSpec", "Node", "RoundInput",
    "RoundResult", "Settings", "ThroughputParams",
]
