"""Placement policies: which concrete GPUs each chosen job gets (PAL's comparison set).

Each maps a PlacementInput (the jobs chosen this round, the GPUs they may use) and a seeded
Generator to job id -> GPU ids, every job getting exactly its GPU count.
  pal               PAL's greedy as published (Jain et al. SC'24, Alg. 1): per class, entries
                    (sf, within one node) costed sf and (sf, across nodes) costed sf x L, sorted
                    by cost; jobs of the most variability-sensitive class first take the cheapest
                    entry that fits; PM-First when none does.
  pm_first          GPUs sorted by the job's class slowdown; ties prefer the node holding the
                    most such GPUs (so a job stays on one node when it can).
  packed_sticky     running jobs keep their GPUs; new jobs on the fewest nodes, ignoring slowdown.
  packed_nonsticky  every job re-packed each round on the fewest nodes.
  random            uniformly random GPUs.
  milp, milp_cpsat  the exact model (formulations.placement), HiGHS or CP-SAT.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from schedlab.formulations.placement import PlacementInput, PlacementJob, solve_placement

Placement = dict[str, tuple[str, ...]]


def _free(pi: PlacementInput) -> list[str]:
    return [g.id for g in pi.gpus]


def _sf(pi: PlacementInput, job: PlacementJob, gpu: str) -> float:
    return pi.gpu_index[gpu].slowdown[job.app_class]


def _node(pi: PlacementInput, gpu: str) -> str:
    return pi.gpu_index[gpu].node


def _by_node(pi: PlacementInput, free: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for g in free:
        out.setdefault(_node(pi, g), []).append(g)
    return out


def _pm_take(pi: PlacementInput, job: PlacementJob, free: list[str]) -> list[str]:
    """PM-First: lowest slowdown first; ties go to the node with the most GPUs at that slowdown."""
    per_node = _by_node(pi, free)
    same = {g: sum(1 for h in per_node[_node(pi, g)] if _sf(pi, job, h) == _sf(pi, job, g)) for g in free}
    ranked = sorted(free, key=lambda g: (_sf(pi, job, g), -same[g], _node(pi, g), g))
    return ranked[: job.num_gpus]


def pm_first(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    free, out = _free(pi), {}
    for job in pi.jobs:
        out[job.id] = tuple(_pm_take(pi, job, free))
        free = [g for g in free if g not in out[job.id]]
    return out


def _sensitivity(pi: PlacementInput, app_class: str) -> float:
    sfs = [g.slowdown[app_class] for g in pi.gpus]
    return max(sfs) - min(sfs)


def pal_greedy(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    free, out = _free(pi), {}
    order = sorted(range(len(pi.jobs)), key=lambda j: (-_sensitivity(pi, pi.jobs[j].app_class), j))
    for j in order:
        job = pi.jobs[j]
        levels = sorted({_sf(pi, job, g) for g in free})
        entries = sorted([(sf, False, sf) for sf in levels] + [(sf * pi.across_node, True, sf) for sf in levels])
        chosen = None
        for _, across, sf in entries:
            ok = [g for g in free if _sf(pi, job, g) <= sf + 1e-12]
            if across and len(ok) >= job.num_gpus:
                chosen = sorted(ok, key=lambda g: (_sf(pi, job, g), _node(pi, g), g))[: job.num_gpus]
            elif not across:
                nodes = [gs for gs in _by_node(pi, ok).values() if len(gs) >= job.num_gpus]
                if nodes:  # the tightest node: fewest spare GPUs left behind
                    best = min(nodes, key=lambda gs: (len(gs), _node(pi, gs[0])))
                    chosen = sorted(best, key=lambda g: (_sf(pi, job, g), g))[: job.num_gpus]
            if chosen:
                break
        out[job.id] = tuple(chosen or _pm_take(pi, job, free))
        free = [g for g in free if g not in out[job.id]]
    return {job.id: out[job.id] for job in pi.jobs}


def _pack(pi: PlacementInput, job: PlacementJob, free: list[str]) -> list[str]:
    """Fewest nodes: the tightest node that fits, else the nodes with the most free GPUs."""
    per_node = _by_node(pi, free)
    fits = [gs for gs in per_node.values() if len(gs) >= job.num_gpus]
    if fits:
        return sorted(min(fits, key=lambda gs: (len(gs), _node(pi, gs[0]))))[: job.num_gpus]
    taken: list[str] = []
    for gs in sorted(per_node.values(), key=lambda gs: (-len(gs), _node(pi, gs[0]))):
        taken += sorted(gs)[: job.num_gpus - len(taken)]
        if len(taken) == job.num_gpus:
            break
    return taken


def packed_sticky(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    out = {j.id: tuple(sorted(j.current_gpus)) for j in pi.jobs
           if j.current_gpus and len(j.current_gpus) == j.num_gpus and all(g in pi.gpu_index for g in j.current_gpus)}
    free = [g for g in _free(pi) if all(g not in gs for gs in out.values())]
    for job in pi.jobs:
        if job.id not in out:
            out[job.id] = tuple(_pack(pi, job, free))
            free = [g for g in free if g not in out[job.id]]
    return {job.id: out[job.id] for job in pi.jobs}


def packed_nonsticky(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    free, out = _free(pi), {}
    for job in sorted(pi.jobs, key=lambda j: -j.num_gpus):
        out[job.id] = tuple(_pack(pi, job, free))
        free = [g for g in free if g not in out[job.id]]
    return {job.id: out[job.id] for job in pi.jobs}


def random_placement(pi: PlacementInput, rng: np.random.Generator) -> Placement:
    free, out = list(rng.permutation(_free(pi))), {}
    for job in pi.jobs:
        out[job.id] = tuple(sorted(str(g) for g in free[: job.num_gpus]))
        free = free[job.num_gpus:]
    return out


def milp(pi: PlacementInput, rng: np.random.Generator, time_limit_s: float = 1.0) -> Placement:
    """The exact model, warm-started from PAL's greedy: never worse than it."""
    return solve_placement(pi, "highs", time_limit_s, start=pal_greedy(pi, rng)).placement


def milp_cpsat(pi: PlacementInput, rng: np.random.Generator, time_limit_s: float = 1.0) -> Placement:
    return solve_placement(pi, "cpsat", time_limit_s, start=pal_greedy(pi, rng)).placement


EXACT = ("milp", "milp_cpsat")  # take a per-round time_limit_s

PLACEMENT_POLICIES: dict[str, Callable[[PlacementInput, np.random.Generator], Placement]] = {
    "pal": pal_greedy, "pm_first": pm_first, "packed_sticky": packed_sticky, "packed_nonsticky": packed_nonsticky,
    "random": random_placement, "milp": milp, "milp_cpsat": milp_cpsat,
}
