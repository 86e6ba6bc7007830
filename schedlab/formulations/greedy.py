"""Greedy allocation: the answer when a solver times out with nothing or fails.

Running jobs keep their GPUs (no restart); then each other job, in order of the value its
best option adds, takes the most valuable option that still fits on concrete nodes. Every
step packs onto real GPUs, so the result is valid by construction (and verified anyway).
"""

from __future__ import annotations

import numpy as np

from schedlab.formulations.options import OptionSet
from schedlab.formulations.packing import NodeState

__all__ = ["greedy_choice"]


def greedy_choice(opts: OptionSet) -> np.ndarray:
    """A boolean mask over options: at most one per job, all realizable together."""
    jobs = opts.round_input.jobs
    state = NodeState(opts.round_input.cluster)
    chosen = np.zeros(opts.num_options, dtype=bool)
    placed: set[int] = set()
    for j in sorted(opts.stay_nodes):
        if state.take_exact(jobs[j].current_gpus):
            chosen[opts.stay_option(j)] = True
            placed.add(j)
    gain = opts.utility - opts.U0[opts.job]
    new = np.flatnonzero(~opts.stay)
    best_gain = np.full(opts.num_jobs, -np.inf)
    np.maximum.at(best_gain, opts.job[new], gain[new])
    for j in np.argsort(-best_gain, kind="stable"):
        if j in placed or not np.isfinite(best_gain[j]):
            continue
        own = new[(opts.job[new] == j) & (gain[new] > 0)]  # never worse than leaving it out
        for c in own[np.argsort(-gain[own], kind="stable")]:
            grp = opts.groups[opts.group[c]]
            per_node = opts.num_gpus[c] if opts.num_nodes[c] == 1 else grp.gpus_per_node
            if state.take_shape(grp.nodes, int(opts.num_nodes[c]), int(per_node)) is not None:
                chosen[c] = True
                break
    return chosen
