"""Random rounds: allocation rounds from the shipped profiles, placement rounds on PAL's world.

`random_round` draws the jobs of the six Pollux applications (some running, some opting in to
layer freezing) that the benchmarks, the fuzzer and the tests solve, on one GPU type or on node
pools of several (`pools`: each job's parameters on every type, derived from its T4 profile by
the application's speed ratio, models.type_speeds); `mixed_pools` splits a size over types;
`random_placement_round`
fills a cluster with PAL's variability with jobs of fixed GPU counts, as the placement
experiments time them.
"""

from __future__ import annotations

import numpy as np

from schedlab.clusters import ClusterSpec, NodePool, make_cluster
from schedlab.formulations.placement_problem import PlacementGpu, PlacementInput, PlacementJob
from schedlab.models.freezing import DEFAULT_BUDGET, layer_profile
from schedlab.models.profiles import APPLICATIONS, ApplicationProfile, shipped_profiles
from schedlab.models.type_speeds import project_params, speed_ratio
from schedlab.models.variability import CLASSES
from schedlab.state import Cluster, FreezeSpec, GpuRef, GradStats, JobSpec, Node, RoundInput, Settings, ThroughputParams

__all__ = ["mixed_pools", "random_placement_round", "random_round"]


def random_round(rng: np.random.Generator, num_gpus: int, num_jobs: int, gpus_per_node: int = 4,
                 running_fraction: float = 0.5, settings: Settings | None = None,
                 freeze_fraction: float = 0.0, pools: tuple[NodePool, ...] = ()) -> RoundInput:
    """A round on num_gpus GPUs: num_jobs jobs of the six applications, some already running.

    Gradient statistics vary around each profile's (log-normal factors), ages up to 4 h, and
    running jobs hold chain-shaped placements packed first-fit, as a previous round leaves them.
    A `freeze_fraction` of the jobs opt in to layer freezing at a uniform progress, 2,000-50,000
    steps long, with up to the default budget left.

    With `pools` the cluster is theirs (nodes n0, n1, ... pool by pool, as clusters.make_cluster
    numbers them; num_gpus and gpus_per_node are not read) and each job carries parameters for
    every type of the pools, its T4 profile's projected by the application's speed ratio
    (models.type_speeds); a running job's GPUs are of one type. The draws are the same as on one
    type, so a seed gives the same jobs on any cluster of the same size.
    """
    if pools:
        nodes = tuple(Node(f"n{k}", gpus, gpu_type) for k, (gpu_type, gpus) in
                      enumerate((p.gpu_type, p.gpus_per_node) for p in pools for _ in range(p.num_nodes)))
        gpus_per_node = max(p.gpus_per_node for p in pools)
    else:
        nodes = tuple(Node(f"n{k}", gpus_per_node) for k in range(max(num_gpus // gpus_per_node, 1)))
    free = [list(range(n.gpus)) for n in nodes]
    types = tuple(dict.fromkeys(n.gpu_type for n in nodes))
    profiles = shipped_profiles()
    jobs = []
    for i in range(num_jobs):
        prof = profiles[APPLICATIONS[rng.integers(len(APPLICATIONS))]]
        grad = GradStats(prof.grad_stats.sqr * rng.lognormal(0, 0.5), prof.grad_stats.var * rng.lognormal(0, 0.5))
        max_gpus = min(max(prof.batch.max_bsz // prof.batch.min_local_bsz, 1), sum(n.gpus for n in nodes))
        current: tuple[GpuRef, ...] = ()
        if rng.random() < running_fraction:
            want = int(rng.choice([1, 2, gpus_per_node, 2 * gpus_per_node]))
            current = _take_first_fit(free, nodes, min(want, max_gpus))
        jobs.append(JobSpec(
            id=f"{prof.name}-{i}", throughput=_throughput(prof, types, bool(pools)), grad_stats=grad, batch=prof.batch,
            min_gpus=1, max_gpus=max_gpus, current_gpus=current, age_s=float(rng.uniform(0, 4 * 3600)),
            num_restarts=int(rng.integers(0, 4)), application=prof.name,
            # no draw at all without opt-ins: seeded rounds stay those of earlier releases
            freezing=_random_freezing(rng, prof.name) if freeze_fraction and rng.random() < freeze_fraction else None,
        ))
    return RoundInput(Cluster(nodes), tuple(jobs), settings or Settings())


def _random_freezing(rng: np.random.Generator, application: str) -> FreezeSpec:
    return FreezeSpec(layer_profile(application), progress=float(rng.uniform()),
                      total_steps=float(rng.uniform(2e3, 5e4)), budget_left=float(rng.uniform(0, DEFAULT_BUDGET)))


def _throughput(prof: ApplicationProfile, types: tuple[str, ...], derived: bool) -> dict[str, ThroughputParams]:
    """The job's parameters per type: its profile's as fitted on one type, else projected per type."""
    if not derived:
        return {types[0]: prof.params}
    return {t: project_params(prof.params, speed_ratio(prof.name, t)) for t in types}


def mixed_pools(num_gpus: int, gpu_types: tuple[str, ...], gpus_per_node: int = 4) -> tuple[NodePool, ...]:
    """num_gpus GPUs in nodes of gpus_per_node split over `gpu_types` as evenly as nodes allow
    (the first types take the odd nodes).

    Examples
    --------
    >>> [(p.gpu_type, p.num_nodes) for p in mixed_pools(64, ("v100", "p100", "k80"))]
    [('v100', 6), ('p100', 5), ('k80', 5)]
    """
    nodes = max(num_gpus // gpus_per_node, len(gpu_types))
    share, odd = divmod(nodes, len(gpu_types))
    return tuple(NodePool(t, share + (k < odd), gpus_per_node) for k, t in enumerate(gpu_types))


def _take_first_fit(free: list[list[int]], nodes: tuple[Node, ...], gpus: int) -> tuple[GpuRef, ...]:
    """`gpus` GPUs first-fit: on one node where a node is that large, else on whole free nodes
    of one type and size (none if they do not add up to `gpus`)."""
    if gpus <= max(n.gpus for n in nodes):
        for k, f in enumerate(free):
            if len(f) >= gpus:
                taken, free[k] = f[:gpus], f[gpus:]
                return tuple(GpuRef(nodes[k].id, i) for i in taken)
        return ()
    for kind in dict.fromkeys((n.gpu_type, n.gpus) for n in nodes if gpus % n.gpus == 0):
        empty = [k for k, f in enumerate(free) if (nodes[k].gpu_type, nodes[k].gpus) == kind
                 and len(f) == nodes[k].gpus][: gpus // kind[1]]
        if len(empty) == gpus // kind[1]:
            refs = []
            for k in empty:
                refs += [GpuRef(nodes[k].id, i) for i in free[k]]
                free[k] = []
            return tuple(refs)
    return ()


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
