r"""Large placements: the exact model, solved one window of nodes at a time around a start (LNS).

The placement model has a column per (job, GPU type), and with measured variability nearly every
GPU is a type of its own: at 1,024 GPUs / 262 jobs it is 471k rows x 321k columns, 3 s to build
and nowhere near a first point in 10 s. Its objective is a sum over jobs, and a job's term
depends only on its own GPUs, so a placement improves exactly as much as any subset of its jobs
does when re-placed on the GPUs they hold. Large neighbourhood search (Shaw, CP'98) on that:

- **start**: P := the start (PAL's greedy); regret_j = w_j (best_j - speed_j(P)), what job j
  could still gain: best_j is its speed on the best GPU of the cluster for it (its class, its
  types), on one node if one can hold it (`best_speed`);
- **window**: for the job j* of largest regret not yet tried: its own nodes, then the nodes
  fastest for it (mean effective slowdown), until WINDOW_GPUS GPUs;
- **free**: J_W = the jobs all of whose GPUs lie in the window; the GPUs offered are the
  window's minus those of jobs partly outside it (these stay where they are);
- **solve**: the exact model (placement.build) of J_W on those GPUs, warm-started from P,
  within the time left; P takes its answer when it is better;

until the time limit (less MIN_WINDOW_S) or every job with regret > 0 was a window's seed. The
answer is never worse than the start. Its bound is every job at best_j, unmoved (`upper_bound`):
the answer is proven optimal only when it reaches that, as when the GPUs do not vary; otherwise
its status is time_limit.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from schedlab.formulations.placement_problem import (
    PlacementInput,
    PlacementJob,
    effective_slowdown,
    job_speed,
    placement_objective,
)
from schedlab.milp import OPTIMAL, TIME_LIMIT
from schedlab.state import Status

__all__ = ["MIN_WINDOW_S", "WINDOW_GPUS", "WindowSearch", "best_speed", "nodes_by_speed", "regret", "search_windows",
           "status", "sub_input", "upper_bound", "window_nodes"]

# Many small windows beat few large ones: on three full 1,024-GPU rounds, 1 s of windows of 16
# GPUs (~65 windows) gained 0.4-0.9 % over PAL's greedy, of 32 GPUs 0.4 %, of 64 GPUs 0-0.02 %.
WINDOW_GPUS = 16
MIN_WINDOW_S = 0.02  # no window starts with less time left (one takes ~15 ms)


@dataclass(frozen=True)
class WindowSearch:
    """A window search's placement, the windows it solved and how many of them improved it."""

    placement: dict[str, tuple[str, ...]]
    windows: int  # sub-models solved
    improved: int  # of which improved the placement


def upper_bound(pi: PlacementInput) -> float:
    """sum_j w_j x best_speed_j: no placement does better."""
    return float(sum(job.weight * best for job, best in zip(pi.jobs, best_speed(pi))))


def status(bound: float, objective: float, mip_gap: float) -> Status:
    """The status of a window search's answer: optimal within mip_gap of the bound, else time_limit.

    Optimal when bound - objective <= mip_gap x |objective|, the bound upper_bound's.
    """
    return OPTIMAL if bound - objective <= mip_gap * max(abs(objective), 1e-9) else TIME_LIMIT


def best_speed(pi: PlacementInput) -> np.ndarray:
    """Per job: best_j, the fastest it could run.

    Its speed on the cluster's best GPU for it (1 / the smallest effective slowdown), on one
    node of its types where one can hold it, else across nodes (divided by L).
    """
    out = {}
    for key, job in {_speed_key(j): j for j in pi.jobs}.items():
        usable = [g for g in pi.gpus if job.speed_on(g.gpu_type) > 0]
        fastest = 1.0 / min(effective_slowdown(job, g) for g in usable)
        out[key] = fastest, max(Counter(g.node for g in usable).values(), default=0)
    return np.array([out[_speed_key(j)][0] / (pi.across_node if j.num_gpus > out[_speed_key(j)][1] else 1.0)
                     for j in pi.jobs])


def regret(pi: PlacementInput, placement: Mapping[str, tuple[str, ...]], best: np.ndarray | None = None) -> np.ndarray:
    """Per job: weight x (best_speed (given, or computed) - its speed now)."""
    best = best_speed(pi) if best is None else best
    return np.array([job.weight * (b - job_speed(pi, job, placement[job.id])) for job, b in zip(pi.jobs, best)])


def _speed_key(job: PlacementJob) -> tuple[str, tuple[tuple[str, float], ...]]:
    """What a job's effective slowdowns depend on: its class and its type speeds."""
    return job.app_class, job.type_speed


def nodes_by_speed(pi: PlacementInput) -> dict[tuple[str, tuple[tuple[str, float], ...]], list[str]]:
    """Per (application class, type speeds) in play: the nodes, fastest (lowest mean effective slowdown) first.

    A node of a type the jobs cannot run on ranks last (infinite slowdown).
    """
    per_node = pi.by_node(g.id for g in pi.gpus)
    mean = {key: {n: np.mean([effective_slowdown(job, pi.gpu_index[g]) for g in gs]) for n, gs in per_node.items()}
            for key, job in {_speed_key(j): j for j in pi.jobs}.items()}
    return {key: sorted(per_node, key=lambda n: (m[n], n)) for key, m in mean.items()}


def window_nodes(pi: PlacementInput, placement: Mapping[str, tuple[str, ...]], seed_job: int,
                 window_gpus: int = WINDOW_GPUS, ranked: Mapping[tuple, list[str]] | None = None) -> list[str]:
    """A window's nodes: the seed job's own, then the nodes fastest for it, up to window_gpus GPUs.

    `ranked` is nodes_by_speed's, computed if not given. The seed job's nodes are all kept even
    when they hold more than window_gpus GPUs.
    """
    job = pi.jobs[seed_job]
    ranked = ranked if ranked is not None else nodes_by_speed(pi)
    per_node = Counter(g.node for g in pi.gpus)
    own = list(dict.fromkeys(pi.node_of(g) for g in placement[job.id]))
    chosen, size = own, sum(per_node[n] for n in own)
    for n in (n for n in ranked[_speed_key(job)] if n not in own):
        if size >= window_gpus:
            break
        chosen.append(n)
        size += per_node[n]
    return chosen


def sub_input(pi: PlacementInput, placement: Mapping[str, tuple[str, ...]], nodes: list[str]) -> PlacementInput:
    """The window's problem: J_W, the jobs wholly inside its nodes, on the GPUs they may use.

    Those are the window's GPUs that J_W holds or that are free; the GPUs of jobs partly
    outside the window stay theirs. L and rho are `pi`'s.
    """
    inside = set(nodes)
    holder = {g: job_id for job_id, gpus in placement.items() for g in gpus}
    freed = [job for job in pi.jobs if all(pi.node_of(g) in inside for g in placement[job.id])]
    freed_ids = {job.id for job in freed}
    gpus = tuple(g for g in pi.gpus if g.node in inside and holder.get(g.id, None) in freed_ids | {None})
    return PlacementInput(gpus, tuple(freed), pi.across_node, pi.restart_penalty)


def search_windows(pi: PlacementInput, start: Mapping[str, tuple[str, ...]], time_limit_s: float,
                   solve: Callable[[PlacementInput, float, Mapping[str, tuple[str, ...]]], dict[str, tuple[str, ...]]],
                   window_gpus: int = WINDOW_GPUS) -> WindowSearch:
    """Large neighbourhood search from `start` (module docstring): never worse than the start.

    Parameters
    ----------
    pi
        The whole problem.
    start
        The first placement, P (PAL's greedy).
    time_limit_s
        Seconds for the whole search; no window starts with less than MIN_WINDOW_S left.
    solve
        `solve(sub_input, time_limit_s, sub_start)`: a window's placement, never worse than
        sub_start (e.g. solve_exact's).
    window_gpus
        A window's size in GPUs (window_nodes).

    Returns
    -------
    WindowSearch
        The placement found, the windows solved and how many of them improved it.
    """
    t0 = time.perf_counter()
    placement = {job.id: tuple(sorted(start[job.id])) for job in pi.jobs}
    tried: set[int] = set()
    ranked, best = nodes_by_speed(pi), best_speed(pi)  # fixed for the whole search: slowdowns do not change
    windows = improved = 0
    while (left_s := time_limit_s - (time.perf_counter() - t0)) > MIN_WINDOW_S:
        gains = regret(pi, placement, best)
        order = [j for j in np.argsort(-gains, kind="stable") if j not in tried]
        if not order or gains[order[0]] <= 1e-12:
            break
        seed_job = int(order[0])
        tried.add(seed_job)
        sub = sub_input(pi, placement, window_nodes(pi, placement, seed_job, window_gpus, ranked))
        sub_start = {job.id: placement[job.id] for job in sub.jobs}
        found = solve(sub, left_s, sub_start)
        windows += 1
        if placement_objective(sub, found) > placement_objective(sub, sub_start) + 1e-12:
            placement.update(found)
            improved += 1
    return WindowSearch(placement, windows, improved)
