"""Exhaustive enumeration of tiny rounds, independent of the round models' capacity rows.

Goodput (`feasible_choices`, `best_objective`): every job takes none or one of its options; a
combination counts only if its options can be placed on concrete nodes: a stay option needs its
GPUs' nodes to keep that many GPUs free (GPUs within a node are interchangeable), a new option
of n nodes x z GPUs needs n distinct nodes of its group with z free GPUs each, found by
backtracking over nodes. Joint (`joint_best`): every concrete GPU set of each job, valued from
the joint model's definition. Placement (`placement_best`): every assignment of GPUs to jobs.

On a cluster of several GPU types each restates the rule on its own: a job runs only on a type
it has throughput parameters for (placement: PlacementJob.speed_on > 0), all its GPUs of one
type; an option or GPU set breaking it is not enumerated, so a model that allowed one would
answer above the brute force.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from schedlab.formulations.joint_options import enumerate_joint_options, tiers
from schedlab.formulations.options import OptionSet, chain_levels, restart_factor, utility
from schedlab.formulations.placement_problem import PlacementInput, placement_objective
from schedlab.models.efficiency import best_batch
from schedlab.state import GpuRef, JobSpec, Node, RoundInput, ThroughputParams, Topology


def _place(free: list[int], nodes: tuple[int, ...], n: int, z: int):
    """Every way to take z GPUs on each of n distinct nodes (nodes differ: later stays need some)."""
    for combo in itertools.combinations(nodes, n):
        if all(free[k] >= z for k in combo):
            yield combo


def feasible_choices(opts: OptionSet) -> list[tuple[int | None, ...]]:
    """All combinations (one option index or None per job) that fit on concrete nodes."""
    nodes, jobs = opts.round_input.cluster.nodes, opts.round_input.jobs
    free0 = [n.gpus for n in nodes]
    per_job = [[c for c in np.flatnonzero(opts.job == j).tolist() if _option_type(opts, c) in jobs[j].throughput]
               for j in range(opts.num_jobs)]
    out: list[tuple[int | None, ...]] = []

    def dfs(j: int, free: list[int], chosen: list[int | None]) -> None:
        if j == opts.num_jobs:
            out.append(tuple(chosen))
            return
        dfs(j + 1, free, chosen + [None])
        for c in per_job[j]:
            if opts.group[c] < 0:
                held = opts.stay_nodes[j]
                if all(free[k] >= h for k, h in held.items()):
                    nxt = free.copy()
                    for k, h in held.items():
                        nxt[k] -= h
                    dfs(j + 1, nxt, chosen + [c])
                continue
            grp = opts.groups[opts.group[c]]
            n = int(opts.num_nodes[c])
            z = int(opts.num_gpus[c]) if n == 1 else grp.gpus_per_node
            for combo in _place(free, grp.nodes, n, z):
                nxt = free.copy()
                for k in combo:
                    nxt[k] -= z
                dfs(j + 1, nxt, chosen + [c])

    dfs(0, free0, [])
    return out


def _option_type(opts: OptionSet, c: int) -> str:
    """The GPU type of option c: its group's, or the nodes' its stay holds."""
    if opts.group[c] >= 0:
        return opts.groups[opts.group[c]].gpu_type
    nodes = opts.round_input.cluster.nodes
    (gpu_type,) = {nodes[k].gpu_type for k in opts.stay_nodes[int(opts.job[c])]}
    return gpu_type


def best_objective(opts: OptionSet, choices: list[tuple[int | None, ...]]) -> float:
    """The best objective over the combinations, restated from the model's definition:
    sum_j (U(s'_c) if job j takes c else U0_j); for max-min, 1000 |J| min_j s'_j + that sum."""
    chosen = np.array([[-1 if c is None else c for c in combo] for combo in choices], dtype=int)
    taken = chosen >= 0
    util = np.where(taken, opts.utility[np.maximum(chosen, 0)], opts.U0[None, :])
    total = util.sum(axis=1)
    if opts.round_input.settings.max_min:
        speed = np.where(taken, opts.penalized_speedup[np.maximum(chosen, 0)], 0.0)
        total = 1e3 * opts.num_jobs * speed.min(axis=1) + total
    return float(total.max())


def _joint_shapes(ri: RoundInput, job: JobSpec) -> list[tuple[GpuRef, ...]]:
    """Every concrete GPU set the joint model lets the job take, of one type it has parameters for.

    Its current GPUs; on one node a chain size (any size where the node's GPUs are not all
    alike); or two or more whole nodes of one type and size.
    """
    out = set()
    held_types = {n.gpu_type for n in ri.cluster.nodes if n.id in {g.node for g in job.current_gpus}}
    if job.running and job.min_gpus <= len(job.current_gpus) <= job.max_gpus and len(held_types) == 1:
        out.add(tuple(sorted(job.current_gpus)))
    for n in ri.cluster.nodes:
        sizes = range(1, n.gpus + 1) if len(_signatures(ri, n)) > 1 else chain_levels(n.gpus) if n.gpus else ()
        for d in sizes:
            out |= {tuple(GpuRef(n.id, i) for i in c) for c in itertools.combinations(range(n.gpus), d)}
    alike: dict[tuple[str, int], list[Node]] = {}
    for n in ri.cluster.nodes:
        alike.setdefault((n.gpu_type, n.gpus), []).append(n)
    for (_, size), nodes in alike.items():
        for k in range(2, len(nodes) + 1):
            for combo in itertools.combinations(nodes, k):
                out.add(tuple(GpuRef(n.id, i) for n in combo for i in range(size)))
    type_of = {n.id: n.gpu_type for n in ri.cluster.nodes}
    return [s for s in out if job.min_gpus <= len(s) <= job.max_gpus
            and len(kinds := {type_of[g.node] for g in s}) == 1 and kinds.pop() in job.throughput]


def _signatures(ri: RoundInput, node: Node) -> set[tuple[float, ...]]:
    """The node's GPUs' tiers in every class in play (alike GPUs have one signature)."""
    tier = _tiers(ri)
    return {tuple(tier[c][node.gpu_slowdown(i, c)] for c in sorted(tier)) for i in range(node.gpus)}


def _tiers(ri: RoundInput) -> dict[str, dict[float, float]]:
    """Per class in play: each slowdown factor -> its tier's value (joint_options.tiers)."""
    nodes = ri.cluster.nodes
    return {c: tiers([n.gpu_slowdown(i, c) for n in nodes for i in range(n.gpus)], ri.settings.tier_tolerance)
            for c in sorted({j.variability_class for j in ri.jobs})}


def _joint_value(ri: RoundInput, j: int, gpus: tuple[GpuRef, ...], fair: float) -> float:
    """The speedup a placement gives, restated from the joint docstring: compute x the worst tier,
    sync x B_ref / B across racks, the step x across_node_factor when spread, on the GPUs' type."""
    job, cluster = ri.jobs[j], ri.cluster
    node = {n.id: n for n in cluster.nodes}
    cls = job.variability_class
    tau = max(_tiers(ri)[cls][node[g.node].gpu_slowdown(g.gpu, cls)] for g in gpus)
    nodes = {g.node for g in gpus}
    topo = cluster.topology or Topology()
    rack = {n: r.id for r in topo.racks for n in r.nodes}
    sync = 1.0
    if len({rack.get(n) for n in nodes}) > 1:
        sync = topo.node_gbps / min(topo.node_gbps, min(r.uplink_gbps for r in topo.racks))
    spread = topo.across_node_factor if len(nodes) > 1 else 1.0
    p = job.throughput[node[gpus[0].node].gpu_type]
    scaled = ThroughputParams(p.alpha_c * tau * spread, p.beta_c * tau * spread, p.alpha_n * sync * spread,
                              p.beta_n * sync * spread, p.alpha_r * spread, p.beta_r * spread, p.gamma)
    good = float(best_batch(scaled, job.grad_stats, job.batch, len(nodes), len(gpus), job.fixed_bsz or 0).goodput[0])
    moved = job.running and tuple(sorted(gpus)) != tuple(sorted(job.current_gpus))
    return good / fair * (restart_factor(job, ri.settings) if moved else 1.0)


def joint_best(ri: RoundInput) -> float:
    """The joint round's best objective over every concrete placement (each job's GPU sets).

    The speedup's reference (the job's fair-share goodput) is the joint options'; all else is
    restated: sum_j U(s_j), U0_j for a job left out, and for max-min 1000 |J| min_j s_j on top.
    """
    opts = enumerate_joint_options(ri)
    fair = {int(j): opts.goodput[c] / opts.speedup[c] for c, j in enumerate(opts.job) if opts.speedup[c] > 0}
    per_job = []
    for j, job in enumerate(ri.jobs):
        choices: list[tuple[frozenset[GpuRef] | None, float, float]] = [(None, float(opts.U0[j]), 0.0)]
        if j in fair:
            for gpus in _joint_shapes(ri, job):
                s = _joint_value(ri, j, gpus, fair[j])
                if s > 0:
                    choices.append((frozenset(gpus), float(utility(np.array([s]), ri.settings.p)[0]), s))
        per_job.append(choices)
    best = -math.inf
    for combo in itertools.product(*per_job):
        used: list[frozenset[GpuRef]] = [g for g, _, _ in combo if g is not None]
        if sum(map(len, used)) != len(frozenset[GpuRef]().union(*used)):
            continue
        total = sum(u for _, u, _ in combo)
        if ri.settings.max_min:
            total += 1e3 * len(ri.jobs) * min(s for _, _, s in combo)
        best = max(best, total)
    return best


def placement_best(pi: PlacementInput) -> tuple[float, dict[str, tuple[str, ...]]]:
    """The best placement_objective over every assignment of GPUs to jobs, each job's GPUs all
    of one GPU type it can run on; and one placement reaching it."""
    best: tuple[float, dict[str, tuple[str, ...]]] = (-math.inf, {})

    def dfs(j: int, free: frozenset[str], placement: dict[str, tuple[str, ...]]) -> None:
        nonlocal best
        if j == len(pi.jobs):
            value = placement_objective(pi, placement)
            if value > best[0]:
                best = (value, dict(placement))
            return
        job = pi.jobs[j]
        for gpu_type in sorted({g.gpu_type for g in pi.gpus}):
            if job.speed_on(gpu_type) > 0:
                mine = sorted(g for g in free if pi.gpu_index[g].gpu_type == gpu_type)
                for gpus in itertools.combinations(mine, job.num_gpus):
                    dfs(j + 1, free - set(gpus), {**placement, job.id: gpus})

    dfs(0, frozenset(g.id for g in pi.gpus), {})
    return best
