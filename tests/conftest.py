"""Shared helpers: tiny random rounds with arbitrary running placements; Hypothesis's profiles;
the Pyomo solver programs a test needs."""

from __future__ import annotations

import os
import sysconfig
from dataclasses import replace
from functools import cache

import numpy as np
import pytest
from hypothesis import settings

from schedlab.bench import random_round
from schedlab.state import GpuRef, RoundInput, Settings

# The default run draws the same examples every time, so the suite cannot fail by the luck of
# a draw (a max-min round on 2-GPU nodes that takes CP-SAT 29 s to prove was drawn once);
# HYPOTHESIS_PROFILE=explore draws new ones, to search for wrong or hard rounds.
settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# The dev extra installs the solver programs Pyomo runs (cbc, glpsol) as scripts beside this
# interpreter: on PATH in an activated environment, not when its python is run by its path.
# Pyomo looks them up on PATH, and so do the CLI runs the tests start.
_SCRIPTS = sysconfig.get_path("scripts")
if _SCRIPTS not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = os.pathsep.join(filter(None, (os.environ.get("PATH"), _SCRIPTS)))


@cache
def pyomo_solver_available(name: str) -> bool:
    """Whether Pyomo's SolverFactory finds and can run the solver `name` (e.g. its program)."""
    import pyomo.environ as pyo  # here: collecting a test module that needs no solver loads no Pyomo

    return bool(pyo.SolverFactory(name).available(exception_flag=False))


def needs_pyomo_solver(name: str) -> pytest.MarkDecorator:
    """Skip a test (or a parameter, as `pytest.param(name, marks=...)`) where Pyomo has no `name`.

    The dev extra brings CBC and GLPK where a wheel has them (Linux and, for CBC, macOS and
    Windows); the others (scip, gurobi, cplex) are the user's to install.
    """
    return pytest.mark.skipif(not pyomo_solver_available(name),
                              reason=f"solver {name!r} is not available to Pyomo (its program is not on PATH, or does not run)")


def tiny_round(rng: np.random.Generator, p: float = -1.0, max_jobs: int = 6, max_nodes: int = 3) -> RoundInput:
    """<= max_jobs jobs on <= max_nodes nodes of 2 or 4 GPUs; running jobs hold arbitrary GPU sets.

    Arbitrary (not chain-shaped) current placements exercise nodes with one and with several
    stayers, which the round model treats differently.
    """
    gpus_per_node = int(rng.choice([2, 4]))
    num_nodes = int(rng.integers(1, max_nodes + 1))
    ri = random_round(rng, num_nodes * gpus_per_node, int(rng.integers(1, max_jobs + 1)), gpus_per_node,
                      running_fraction=0.0, settings=Settings(p=p))
    free = [(n.id, i) for n in ri.cluster.nodes for i in range(n.gpus)]
    rng.shuffle(free)
    jobs = []
    for job in ri.jobs:
        if free and rng.random() < 0.6:
            count = int(rng.integers(1, min(len(free), gpus_per_node + 1) + 1))
            taken, free = free[:count], free[count:]
            job = replace(job, current_gpus=tuple(GpuRef(n, i) for n, i in taken), age_s=float(rng.uniform(0, 3600)))
        jobs.append(job)
    return replace(ri, jobs=tuple(jobs))
