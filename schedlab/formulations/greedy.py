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
    placed = [False] * opts.num_jobs
    for j in sorted(opts.stay_nodes):
        if state.take_exact(jobs[j].current_gpus):
            chosen[opts.stay_option(j)] = True
            placed[j] = True
    gain = opts.utility - opts.U0[opts.job]
    new = np.flatnonzero(~opts.stay)
    best_gain = np.full(opts.num_jobs, -np.inf)
    np.maximum.at(best_gain, opts.job[new], gain[new])
    rank = np.empty(opts.num_jobs, dtype=int)
    rank[np.argsort(-best_gain, kind="stable")] = np.arange(opts.num_jobs)
    # Every option worth more than leaving its job out, by its job's turn (best gain first), then
    # its own gain, then its index: each job tries its options in that order until one fits.
    tries = new[gain[new] > 0]
    tries = tries[np.lexsort((-gain[tries], rank[opts.job[tries]]))]
    per_node = opts.item_size
    for c, j, g, n, z in zip(tries.tolist(), opts.job[tries].tolist(), opts.group[tries].tolist(),
                             opts.num_nodes[tries].tolist(), per_node[tries].tolist()):
        if not placed[j] and state.take_shape(opts.groups[g].nodes, n, z) is not None:
            chosen[c] = placed[j] = True
    return chosen
