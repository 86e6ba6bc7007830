"""Greedy allocations: the answer when a solver times out with nothing or fails.

`greedy_choice`: running jobs keep their GPUs (no restart); then each other job, in order of
the value its best option adds, takes the most valuable option that still fits on concrete
nodes. Every step packs onto real GPUs, so the result is valid by construction (and verified
anyway).

`max_min_floor`, for max-min rounds, whose objective is first the smallest speedup t: a greedy
of value serves the valuable jobs and can leave others without GPUs (t = 0) where every job
could run. Instead a floor is bisected over the options' speedups s'_c. At a floor each job
may take only its options that reach it, in the order of the fewest GPUs (its stay first on a
tie: no restart), then the highest s'_c; the jobs whose first such option is their stay take
their GPUs back first, then the others, those whose fewest GPUs are the most first (large items
first, as packing.py packs), each its first option that fits. The floor holds when every job
got one; the highest that held within FLOOR_STEPS tries is the answer. A formulation supplies
what taking an option means (`Taker`): `max_min_choice` is the goodput round's,
joint_decode.max_min_point the joint round's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

import numpy as np

from schedlab.formulations.options import OptionSet
from schedlab.formulations.packing import NodeState

__all__ = ["FLOOR_STEPS", "Taker", "greedy_choice", "max_min_choice", "max_min_floor"]


def greedy_choice(opts: OptionSet) -> np.ndarray:
    """A boolean mask over options: at most one per job, all realizable together."""
    packing = _Packing(opts)
    for j in sorted(opts.stay_nodes):
        packing.take(opts.stay_option(j))
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
    for c in tries.tolist():
        if opts.job[c] not in packing.placed:
            packing.take(c)
    return packing.chosen


class Taker(Protocol):
    """What taking an option means to a formulation's greedy: a fresh one has nothing taken."""

    def take(self, c: int) -> bool:
        """Take option c if it fits beside what is taken; whether it did."""


_T = TypeVar("_T", bound=Taker)

# Floors tried at most: each is a greedy pass (a 2,048-GPU joint round's: ~45 ms), and 8 halvings
# settle the floor within 1/256 of the options' speedups, by rank
FLOOR_STEPS = 8


def max_min_floor(job: np.ndarray, num_gpus: np.ndarray, stay: np.ndarray, speedup: np.ndarray, num_jobs: int,
                  total_gpus: int, fresh: Callable[[], _T]) -> _T | None:
    """The options' columns (each one's job, a_c, whether it is a stay, s'_c), the round's jobs
    and GPUs, and a maker of fresh Takers: the Taker of the highest floor the bisection of the
    module docstring serves, every job with one option taken; None where some job has no option,
    the jobs' fewest GPUs together are more than the cluster's, or no floor above 0 is served."""
    fewest = np.full(num_jobs, np.inf)
    np.minimum.at(fewest, job, num_gpus)
    if fewest.sum() > total_gpus:  # inf where a job has no option
        return None
    order = np.lexsort((-speedup, ~stay, num_gpus, job))  # each job's options as a floor tries them
    floors = np.unique(speedup[speedup > 0])
    best, lo, hi = None, 0, len(floors) - 1
    for _ in range(FLOOR_STEPS):
        if lo > hi:
            break
        mid = (lo + hi) // 2
        taker = fresh()
        if _serves(job, num_gpus, stay, num_jobs, order[speedup[order] >= floors[mid]], taker):
            best, lo = taker, mid + 1
        else:
            hi = mid - 1
    return best


def _serves(job: np.ndarray, num_gpus: np.ndarray, stay: np.ndarray, num_jobs: int, tries: np.ndarray,
            taker: Taker) -> bool:
    """Whether `taker` takes an option for every job from `tries` (the options that reach the
    floor, job by job in the order each tries them), stays first, then the largest first."""
    of = job[tries]
    starts = np.flatnonzero(np.r_[True, of[1:] != of[:-1]]) if len(tries) else np.zeros(0, dtype=int)
    if len(starts) < num_jobs:
        return False
    first, ends = tries[starts], np.r_[starts[1:], len(tries)]
    served = np.zeros(len(starts), dtype=bool)
    for i in np.flatnonzero(stay[first]).tolist():
        served[i] = taker.take(int(first[i]))
    for i in np.argsort(-num_gpus[first], kind="stable").tolist():
        if not served[i] and not any(taker.take(c) for c in tries[starts[i]:ends[i]].tolist()):
            return False
    return True


def max_min_choice(opts: OptionSet) -> np.ndarray | None:
    """A boolean mask over options, one for every job, at the highest floor `max_min_floor` serves; None where none."""
    found = max_min_floor(opts.job, opts.num_gpus, opts.stay, opts.penalized_speedup, opts.num_jobs,
                          opts.round_input.cluster.total_gpus, lambda: _Packing(opts))
    return None if found is None else found.chosen


class _Packing:
    """The goodput round's Taker, both greedies': stays on their own GPUs, shapes best fit
    (packing.NodeState); the options taken and their jobs."""

    def __init__(self, opts: OptionSet) -> None:
        self.opts = opts
        self.state = NodeState(opts.round_input.cluster)
        self.chosen = np.zeros(opts.num_options, dtype=bool)
        self.placed: set[int] = set()

    def take(self, c: int) -> bool:
        """Take option c where it fits; whether it did."""
        o = self.opts
        if o.stay[c]:
            fits = self.state.take_exact(o.round_input.jobs[o.job[c]].current_gpus)
        else:
            fits = self.state.take_shape(o.groups[o.group[c]].nodes, int(o.num_nodes[c]), int(o.item_size[c])) is not None
        if fits:
            self.chosen[c] = True
            self.placed.add(int(o.job[c]))
        return fits
