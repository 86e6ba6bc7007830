"""Partitioned solving for the largest rounds, after POP (Narayanan et al., SOSP'21).

POP splits a granular allocation problem into k sub-problems, each with 1/k of the jobs and 1/k
of the resources, solves them independently and in parallel, and merges the answers: the loss
is small when every sub-problem looks like a scaled-down copy of the whole. Here:

  nodes   contiguous runs of blocks of the cluster with about G/k GPUs each, a block being a
          node, or a whole rack where the formulation prices the topology (its registry
          entry's `whole_racks`: no spread it could choose is cut); cut only where no running
          job holds GPUs on both sides (so every running job can stay, and pays its restart
          factor if it moves, as in the whole round); each part keeps the topology of its own
          nodes;
  jobs    a running job goes with the part that holds its GPUs; a waiting job goes to the part
          with the fewest jobs per GPU so far, so that every part's fair share (GPUs per job) is
          the whole round's;
  solve   each part is a round of its own (solve_round, same settings), on local processes by
          default or on any concurrent.futures Executor (Dask: client.get_executor());
  merge   allocations in the round's job order; objective and bound the parts' sums (each
          part's bound its solver's or its LP relaxation's, so the merged answer has one
          unless some part had none in time, `bound_timed_out`).

How many parts (settings.partitions 0): by the number of jobs, at most the formulation's
`jobs_per_part` a part (schedlab.formulations.Formulation). The merged answer is valid
(verified against the whole round) but not proven optimal for it: status "partitioned", and the
bound is the partitioned problem's. `schedlab bench --scale` reports the loss against the
unpartitioned LP bound.
"""

from __future__ import annotations

import heapq
import math
import os
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import replace

import numpy as np

from schedlab.formulations import FORMULATIONS
from schedlab.state import Cluster, Node, RoundInput, RoundResult, Status, Topology

__all__ = ["PARTITIONED", "PART_SHARE", "auto_partitions", "solve_partitioned", "split_round"]

PARTITIONED = Status.PARTITIONED


def auto_partitions(round_input: RoundInput) -> int:
    """settings.partitions, or when 0 the smallest k with at most the formulation's
    jobs_per_part jobs a part (never more parts than blocks: nodes, or racks kept whole)."""
    entry = FORMULATIONS[round_input.settings.formulation]
    k = round_input.settings.partitions or math.ceil(len(round_input.jobs) / entry.jobs_per_part)
    return max(1, min(k, int(_block_of(round_input).max(initial=0)) + 1))


def split_round(round_input: RoundInput, k: int) -> list[RoundInput]:
    """The sub-rounds (at most k: fewer where running jobs leave no cut) of the module docstring."""
    nodes = round_input.cluster.nodes
    index = round_input.cluster.node_index
    block_of = _block_of(round_input)
    blocks = int(block_of.max(initial=0)) + 1
    part_of = np.cumsum(np.isin(np.arange(blocks), _cuts(round_input, block_of, k)))[block_of]  # part of each node
    num_parts = int(part_of.max(initial=0)) + 1
    members: list[list[Node]] = [[] for _ in range(num_parts)]
    for n, q in zip(nodes, part_of.tolist()):
        members[q].append(n)
    node_parts = [tuple(ns) for ns in members]
    gpus = [sum(n.gpus for n in ns) for ns in node_parts]
    jobs: list[list[int]] = [[] for _ in range(num_parts)]
    running = [j for j, job in enumerate(round_input.jobs) if job.running]
    for j in running:
        jobs[int(part_of[index[round_input.jobs[j].current_gpus[0].node]])].append(j)
    # then fill up the fair shares: each waiting job to the part with the fewest jobs per GPU (the
    # first such part), kept in a heap of (jobs per GPU, part)
    fewest = [(len(jobs[q]) / max(gpus[q], 1), q) for q in range(num_parts)]
    heapq.heapify(fewest)
    for j in sorted(set(range(len(round_input.jobs))) - set(running)):
        q = fewest[0][1]
        jobs[q].append(j)
        heapq.heapreplace(fewest, (len(jobs[q]) / max(gpus[q], 1), q))
    settings = replace(round_input.settings, partitions=1)
    cluster = round_input.cluster
    return [RoundInput(Cluster(node_parts[q], _sub_topology(cluster.topology, node_parts[q]), cluster.gpu_speed),
                       tuple(round_input.jobs[j] for j in sorted(jobs[q])), settings, round_input.round_s)
            for q in range(num_parts)]


def _block_of(round_input: RoundInput) -> np.ndarray:
    """Each node's block, what no cut splits, numbered in the order of the blocks' first nodes:
    its rack where the formulation keeps racks whole and the cluster has them (a node in no rack
    is a block alone), else the node alone."""
    cluster = round_input.cluster
    racks = cluster.topology.racks if cluster.topology is not None else ()
    if not (FORMULATIONS[round_input.settings.formulation].whole_racks and racks):
        return np.arange(len(cluster.nodes))
    rack_of = {node: r for r, rack in enumerate(racks) for node in rack.nodes}
    raw = np.array([rack_of.get(n.id, len(racks) + k) for k, n in enumerate(cluster.nodes)])  # unracked: alone
    _, first = np.unique(raw, return_index=True)
    rank = np.empty(len(first), dtype=int)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[np.unique(raw, return_inverse=True)[1]]


def _cuts(round_input: RoundInput, block_of: np.ndarray, k: int) -> list[int]:
    """Indices of the blocks that start a new part: the allowed cut nearest each ideal one."""
    nodes = round_input.cluster.nodes
    index = round_input.cluster.node_index
    blocks = int(block_of.max(initial=0)) + 1
    spans = np.zeros(blocks + 1, dtype=int)  # a cut before block b splits a running job
    block_list = block_of.tolist()  # read per GPU: a list, not numpy's per-item cost
    for job in round_input.jobs:
        if job.running:
            held = [block_list[index[g.node]] for g in job.current_gpus]
            spans[min(held) + 1] += 1
            spans[max(held) + 1] -= 1
    allowed = np.flatnonzero(np.cumsum(spans)[:-1] == 0)
    allowed = allowed[allowed > 0]
    sizes = np.bincount(block_of, weights=[n.gpus for n in nodes], minlength=blocks)
    starts = np.cumsum(np.concatenate([[0.0], sizes]))[:-1]  # GPUs before each block
    total = starts[-1] + sizes[-1]
    cuts = {int(allowed[np.argmin(np.abs(starts[allowed] - q * total / k))]) for q in range(1, k) if len(allowed)}
    return sorted(cuts)


def _sub_topology(topology: Topology | None, nodes) -> Topology | None:
    if topology is None:
        return None
    ids = {n.id for n in nodes}
    racks = tuple(replace(r, nodes=tuple(n for n in r.nodes if n in ids)) for r in topology.racks)
    return replace(topology, racks=tuple(r for r in racks if r.nodes))


# Of the time left, the share a part's solve gets per wave of parts: the rest pays for starting
# the processes, pickling the parts and merging (measured: ~15 % at 65,536 GPUs on 2 cores).
PART_SHARE = 0.7


def solve_partitioned(round_input: RoundInput, k: int, solve: Callable[[RoundInput], RoundResult],
                      executor: Executor | None = None, left_s: float | None = None) -> RoundResult:
    """Solve the k parts with `solve` (in parallel on `executor`, else local processes) and merge.
    With `left_s`, the seconds left of the round's limit, each part's limit is its share of them
    (parts beyond the local processes run in later waves)."""
    parts = split_round(round_input, k)
    workers = min(len(parts), os.cpu_count() or 1) if executor is None else len(parts)
    if left_s is not None:
        waves = math.ceil(len(parts) / workers)
        limit_s = max(PART_SHARE * left_s / waves, 1e-2)
        parts = [replace(p, settings=replace(p.settings, time_limit_s=limit_s)) for p in parts]
    if executor is None:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(solve, parts))
    else:
        results = list(executor.map(solve, parts))
    by_id = {a.job_id: a for r in results for a in r.allocations}
    statuses = Counter(r.status for r in results)
    objective = sum(r.objective for r in results)
    bound = sum(r.bound for r in results)  # NaN where some part has none
    return RoundResult(
        allocations=tuple(by_id[job.id] for job in round_input.jobs), status=PARTITIONED,
        solver=round_input.settings.solver, objective=objective, bound=bound if math.isfinite(bound) else math.nan,
        gap=abs(bound - objective) / max(abs(objective), 1e-9) if math.isfinite(bound) else math.inf,
        build_s=max(r.build_s for r in results), solve_s=max(r.solve_s for r in results), verified=True,
        message=f"partitioned into {len(parts)} parts ({', '.join(f'{n} {s}' for s, n in statuses.items())}); "
                "bound and gap are the partitioned problem's",
        options_s=max(r.options_s for r in results), bound_timed_out=any(r.bound_timed_out for r in results),
    )
