"""Random rounds: allocation rounds from the shipped profiles, placement rounds on PAL's world.

`random_round` draws the jobs of the six Pollux applications (some running, some opting in to
layer freezing) that the benchmarks, the fuzzer and the tests solve; `random_placement_round`
fills a cluster with PAL's variability with jobs of fixed GPU counts, as the placement
experiments time them.
"""

from __future__ import annotations

import numpy as np

from schedlab.clusters import ClusterSpec, make_cluster
from schedlab.formulations.placement_problem import PlacementGpu, PlacementInput, PlacementJob
from schedlab.models.freezing import DEFAULT_BUDGET, layer_profile
from schedlab.models.profiles import APPLICATIONS, shipped_profiles
from schedlab.models.variability import CLASSES
from schedlab.state import Cluster, FreezeSpec, GpuRef, GradStats, JobSpec, Node, RoundInput, Settings

__all__ = ["random_placement_round", "random_round"]


def random_round(rng: np.random.Generator, num_gpus: int, num_jobs: int, gpus_per_node: int = 4,
                 running_fraction: float = 0.5, settings: Settings | None = None,
                 freeze_fraction: float = 0.0) -> RoundInput:
    """A round on num_gpus GPUs: num_jobs jobs of the six applications, some already running.

    Gradient statistics vary around each profile's (log-normal factors), ages up to 4 h, and
    running jobs hold chain-shaped placements packed first-fit, as a previous round leaves them.
    A `freeze_fraction` of the jobs opt in to layer freezing at a uniform progress, 2,000-50,000
    steps long, with up to the default budget left.
    """
    nodes = tuple(Node(f"n{k}", gpus_per_node) for k in range(max(num_gpus // gpus_per_node, 1)))
    free = [list(range(gpus_per_node)) for _ in nodes]
    profiles = shipped_profiles()
    jobs = []
    for i in range(num_jobs):
        prof = profiles[APPLICATIONS[rng.integers(len(APPLICATIONS))]]
        grad = GradStats(prof.grad_stats.sqr * rng.lognormal(0, 0.5), prof.grad_stats.var * rng.lognormal(0, 0.5))
        max_gpus = min(max(prof.batch.max_bsz // prof.batch.min_local_bsz, 1), len(nodes) * gpus_per_node)
        current: tuple[GpuRef, ...] = ()
        if rng.random() < running_fraction:
            want = int(rng.choice([1, 2, gpus_per_node, 2 * gpus_per_node]))
            current = _take_first_fit(free, nodes, min(want, max_gpus), gpus_per_node)
        jobs.append(JobSpec(
            id=f"{prof.name}-{i}", throughput={nodes[0].gpu_type: prof.params}, grad_stats=grad, batch=prof.batch,
            min_gpus=1, max_gpus=max_gpus, current_gpus=current, age_s=float(rng.uniform(0, 4 * 3600)),
            num_restarts=int(rng.integers(0, 4)), application=prof.name,
            # no draw at all without opt-ins: seeded rounds stay those of earlier releases
            freezing=_random_freezing(rng, prof.name) if freeze_fraction and rng.random() < freeze_fraction else None,
        ))
    return RoundInput(Cluster(nodes), tuple(jobs), settings or Settings())


def _random_freezing(rng: np.random.Generator, application: str) -> FreezeSpec:
    return FreezeSpec(layer_profile(application), progress=float(rng.uniform()),
                      total_steps=float(rng.uniform(2e3, 5e4)), budget_left=float(rng.uniform(0, DEFAULT_BUDGET)))


def _take_first_fit(free: list[list[int]], nodes, gpus: int, gpus_per_node: int) -> tuple[GpuRef, ...]:
    if gpus <= gpus_per_node:
        for k, f in enumerate(free):
            if len(f) >= gpus:
                taken, free[k] = f[:gpus], f[gpus:]
                return tuple(GpuRef(nodes[k].id, i) for i in taken)
        return ()
    empty = [k for k, f in enumerate(free) if len(f) == gpus_per_node][: gpus // gpus_per_node]
    if len(empty) < gpus // gpus_per_node:
        return ()
    refs = []
    for k in empty:
        refs += [GpuRef(nodes[k].id, i) for i in free[k]]
        free[k] = []
    return tuple(refs)


def random_placement_round(num_gpus: int, seed: int, rng: np.random.Generator) -> PlacementInput:
    """A placement round on num_gpus GPUs (4 per node) of PAL's world, filled with jobs.

    The cluster is `clusters.make_cluster`'s with measured variability drawn with `seed`, every
    GPU as the scheduler sees it (PAL's tiers); the jobs, of 1, 2, 4 or 8 GPUs and one of the
    variability classes each, are drawn from `rng` until the next one does not fit.
    """
    seen, _ = make_cluster(ClusterSpec(num_gpus // 4, 4, variability="measured", seed=seed))
    gpus = tuple(PlacementGpu(f"{n.id}/{k}", n.id, {c: n.gpu_slowdown(k, c) for c in CLASSES})
                 for n in seen.nodes for k in range(n.gpus))
    jobs: list[PlacementJob] = []
    used = 0
    while True:
        size = int(rng.choice([1, 2, 4, 8]))
        if used + size > num_gpus:
            break
        jobs.append(PlacementJob(f"j{len(jobs)}", size, CLASSES[rng.integers(len(CLASSES))]))
        used += size
    return PlacementInput(gpus, tuple(jobs))
