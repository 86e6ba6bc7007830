"""Shared helpers: tiny random rounds with arbitrary running placements; Hypothesis's profiles."""

from __future__ import annotations

import os
from dataclasses import replace

import numpy as np
from hypothesis import settings

from schedlab.bench import random_round
from schedlab.state import GpuRef, RoundInput, Settings

# The default run draws the same examples every time, so the suite cannot fail by the luck of
# a draw (a max-min round on 2-GPU nodes that takes CP-SAT 29 s to prove was drawn once);
# HYPOTHESIS_PROFILE=explore draws new ones, to search for wrong or hard rounds.
settings.register_profile("default", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


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
