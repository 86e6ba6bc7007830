"""The Pyomo solvers the registry runs by name (the legacy SolverFactory route), and how each is
told the time limit, the gap and the threads: plain data, so the registry can list the names
without loading Pyomo (solvers.pyomo_backend applies them)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LEGACY_OPTIONS", "LegacyOptions"]


@dataclass(frozen=True)
class LegacyOptions:
    """How one Pyomo solver is told the time limit, the relative gap and the threads (its own
    option names), and whether it is given the model's start point: only where it honours it.
    `whole_seconds`: the solver reads the time limit as an integer (glpsol's --tmlim)."""

    time_limit: str
    gap: str
    threads: str | None
    takes_start: bool
    whole_seconds: bool = False


# CBC 2.10 hands a MIP start back as "Optimal" without searching (-85.5 reported optimal where
# the optimum is -42.3), so it starts cold; GLPK and SCIP take no start through Pyomo's files.
LEGACY_OPTIONS = {
    "cbc": LegacyOptions("sec", "ratioGap", "threads", takes_start=False),
    "glpk": LegacyOptions("tmlim", "mipgap", None, takes_start=False, whole_seconds=True),
    "scip": LegacyOptions("limits/time", "limits/gap", "parallel/maxnthreads", takes_start=False),
    "gurobi": LegacyOptions("TimeLimit", "MIPGap", "Threads", takes_start=True),
    "cplex": LegacyOptions("timelimit", "mip_tolerances_mipgap", "threads", takes_start=True),
}
