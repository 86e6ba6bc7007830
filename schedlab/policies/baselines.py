"""The classic baselines, as the Pollux artifact runs them (simulator/tiresias.py, optimus.py).

All three train every job at the batch size its user submitted (JobSpec.submitted_bsz) and place
new work greedily on the nodes with the most free GPUs; a job that keeps its GPU count keeps
its GPUs.

tiresias  Two-queue discretized least-attained-service (Gu et al., NSDI'19): a job starts in
          queue 0 and is demoted to queue 1 once it has received 16 GPU-hours; queue 0 before
          queue 1, first come first served within a queue (demotion order in queue 1). Jobs are
          gang-scheduled at their requested GPU count; a job that does not fit waits (and is
          preempted if it was running) while smaller jobs behind it may run.
optimus   Optimus (Peng et al., EuroSys'18) with the artifact's oracle: every job gets one GPU
          (in the round's job order) while GPUs last, then GPUs go one at a time to the job
          whose predicted remaining time (steps left x predicted step time) drops the most, up
          to its max_gpus (a replay sets fixed_bsz / min_local_bsz, as the artifact does).
fifo      Static requests, first come first served, no preemption and no backfilling: the
          oldest waiting job starts as soon as its requested GPUs are free.
On a cluster of several GPU types they stay type-blind: a job's GPUs are of one type it has a
model for (as every job's must be), the one with the most free GPUs (ties: cluster order).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import ClassVar

from schedlab.formulations.packing import NodeState
from schedlab.models.efficiency import goodput, split_fixed_batch, submitted_fits
from schedlab.models.throughput import step_time_s
from schedlab.policies.base import HEURISTIC
from schedlab.state import (
    BatchLimits,
    Cluster,
    GpuRef,
    GradStats,
    JobAllocation,
    JobSpec,
    RoundInput,
    RoundResult,
    ThroughputParams,
)
from schedlab.verify import verify

__all__ = ["FifoPolicy", "OptimusPolicy", "TiresiasPolicy"]


def _params(job: JobSpec, gpu_type: str | None = None) -> ThroughputParams:
    """The job's throughput model on `gpu_type` (default: its first type's)."""
    return job.throughput[gpu_type] if gpu_type is not None else next(iter(job.throughput.values()))


def fixed_allocation(job: JobSpec, gpus: tuple[GpuRef, ...], gpu_type: str) -> JobAllocation:
    """The allocation of a job training at its submitted batch on `gpus`, of `gpu_type`."""
    if not gpus:
        return JobAllocation.unallocated(job.id)
    r = len(gpus)
    micro, accum, value = _fixed_run(_params(job, gpu_type), job.grad_stats, job.batch_on(gpu_type), job.submitted_bsz,
                                     len({g.node for g in gpus}), r)
    return JobAllocation(job.id, gpus, r * micro * (accum + 1), micro, accum, value, 0.0, job.restarted_on(gpus),
                         projected=job.projected_on(gpu_type))


@lru_cache(maxsize=1 << 16)  # every round asks again for the same jobs on the same shapes
def _fixed_run(params: ThroughputParams, grad: GradStats, batch: BatchLimits, submitted_bsz: int, nodes: int,
               r: int) -> tuple[int, int, float]:
    """Micro-batch, accumulation steps and goodput at the submitted batch on `nodes` x `r` GPUs."""
    micro, accum = split_fixed_batch(submitted_bsz, r, batch)
    return micro, accum, float(goodput(params, grad, batch.init_bsz, nodes, r, micro, accum))


@lru_cache(maxsize=1 << 16)  # every round asks again for the same jobs one GPU up (283,490 asks in one replay)
def _packed_step_s(params: ThroughputParams, batch: BatchLimits, submitted_bsz: int, num_replicas: int,
                   gpus_per_node: int) -> float:
    """Seconds per step at the submitted batch on `num_replicas` GPUs over the fewest nodes."""
    micro, accum = split_fixed_batch(submitted_bsz, num_replicas, batch)
    return float(step_time_s(params, math.ceil(num_replicas / gpus_per_node), num_replicas, micro, accum))


def arrival_order(jobs: tuple[JobSpec, ...]) -> list[JobSpec]:
    """Oldest first; jobs of the same age keep their input order."""
    return sorted(jobs, key=lambda j: -j.age_s)


def _result(round_input: RoundInput, name: str, gpus: dict[str, tuple[GpuRef, ...]], t0: float) -> RoundResult:
    """The verified RoundResult of jobs on `gpus` at their submitted batches (status heuristic)."""
    held = {j.id: gpus.get(j.id, ()) for j in round_input.jobs}
    allocations = tuple(fixed_allocation(j, held[j.id], _gpu_type(round_input.cluster, held[j.id]) if held[j.id] else "")
                        for j in round_input.jobs)
    verify(round_input, allocations)
    return RoundResult(allocations, HEURISTIC, name, math.nan, math.nan, math.nan, 0.0,
                       time.perf_counter() - t0, True)


def _gpu_type(cluster: Cluster, gpus: tuple[GpuRef, ...]) -> str:
    """The GPU type of a job's GPUs (it holds some)."""
    return cluster.nodes[cluster.node_index[gpus[0].node]].gpu_type


class _FreeByType:
    """Free GPUs per GPU type, and the GPU count and type given to each job so far, for baselines
    that count GPUs without looking at their type."""

    def __init__(self, round_input: RoundInput):
        self.cluster = round_input.cluster
        self.left: dict[str, int] = {}  # in cluster order
        for node in self.cluster.nodes:
            self.left[node.gpu_type] = self.left.get(node.gpu_type, 0) + node.gpus
        self.counts: dict[str, int] = {}
        self.types: dict[str, str] = {}
        for job in round_input.jobs:  # pinned jobs keep their GPUs this round
            if job.pinned:
                self.give(job, len(job.current_gpus), _gpu_type(self.cluster, job.current_gpus))

    def fit(self, job: JobSpec, count: int) -> str | None:
        """The type of the job's GPUs if it holds some and `count` fit there (it stays), else the
        type it has a model for and its batch fits on `count` GPUs of, with the most free GPUs,
        at least `count` (ties: cluster order); None if none has that many."""
        if job.current_gpus and self.left[current := _gpu_type(self.cluster, job.current_gpus)] >= count:
            return current
        fits = [t for t, left in self.left.items()
                if left >= count and t in job.throughput and submitted_fits(job, count, t)]
        return max(fits, key=self.left.__getitem__) if fits else None

    def admit(self, job: JobSpec, count: int) -> bool:
        """Give the job `count` GPUs of the type `fit` picks; False (nothing given) if none fits."""
        gpu_type = self.fit(job, count)
        if gpu_type is not None:
            self.give(job, count, gpu_type)
        return gpu_type is not None

    def give(self, job: JobSpec, count: int, gpu_type: str) -> None:
        """Record the job on `count` GPUs of `gpu_type`, taken."""
        self.counts[job.id], self.types[job.id] = count, gpu_type
        self.take(gpu_type, count)

    def take(self, gpu_type: str, count: int) -> None:
        """Count `count` GPUs of `gpu_type` taken."""
        self.left[gpu_type] -= count


def _place(round_input: RoundInput, counts: dict[str, int], types: dict[str, str],
           order: list[JobSpec]) -> dict[str, tuple[GpuRef, ...]]:
    """Keep the GPUs of pinned jobs and of jobs whose count and type are unchanged; place the
    others in `order`, each on the nodes of its type."""
    cluster = round_input.cluster
    kept = {j.id: j.current_gpus for j in round_input.jobs
            if j.current_gpus and (j.pinned or len(j.current_gpus) == counts.get(j.id, 0)
                                   and _gpu_type(cluster, j.current_gpus) == types[j.id])}
    free = NodeState(cluster)
    for gpus in kept.values():
        free.take_exact(gpus)
    nodes_of: dict[str, tuple[int, ...]] = {}
    for k, node in enumerate(cluster.nodes):
        nodes_of[node.gpu_type] = (*nodes_of.get(node.gpu_type, ()), k)
    one_type = len(nodes_of) == 1  # all nodes: the group take_most_free knows already
    out = dict(kept)
    for job in order:
        if counts.get(job.id, 0) and job.id not in out:
            out[job.id] = free.take_most_free(counts[job.id], None if one_type else nodes_of[types[job.id]])
    return out


@dataclass
class TiresiasPolicy:
    """Tiresias's two-queue discretized least-attained-service, gang-scheduled (module docstring).

    `threshold_gpu_s` is the service, in GPU-seconds, after which a job moves to queue 1 (16
    GPU-hours). The policy remembers the order in which jobs were demoted.
    """

    threshold_gpu_s: float = 16 * 3600.0
    name: ClassVar[str] = "tiresias"
    batch_mode: ClassVar[str] = "fixed"
    throughput_model: ClassVar[str] = "oracle"
    _demoted: dict[str, int] = field(default_factory=dict)

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """Queue 0 then queue 1: each job runs on its requested GPUs if they are left, else waits."""
        t0 = time.perf_counter()
        jobs = arrival_order(round_input.jobs)
        for job in jobs:
            if job.attained_service_gpu_s >= self.threshold_gpu_s and job.id not in self._demoted:
                self._demoted[job.id] = len(self._demoted)
        queue0 = [j for j in jobs if j.id not in self._demoted]
        queue1 = sorted((j for j in jobs if j.id in self._demoted), key=lambda j: self._demoted[j.id])
        free = _FreeByType(round_input)
        for job in queue0 + queue1:
            if job.id not in free.counts:
                free.admit(job, job.gang_gpus)
        return _result(round_input, self.name, _place(round_input, free.counts, free.types, queue0 + queue1), t0)


@dataclass
class OptimusPolicy:
    """Optimus with the Pollux artifact's oracle: GPUs where they shorten the predicted remaining time most."""

    name: ClassVar[str] = "optimus"
    batch_mode: ClassVar[str] = "fixed"
    throughput_model: ClassVar[str] = "oracle"

    @staticmethod
    def predicted_step_s(job: JobSpec, num_replicas: int, gpus_per_node: int, gpu_type: str | None = None) -> float:
        """Seconds per step at the submitted batch on `num_replicas` GPUs (of `gpu_type`) over the fewest nodes."""
        return _packed_step_s(_params(job, gpu_type), job.batch, job.submitted_bsz, num_replicas, gpus_per_node)

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """Pinned jobs on their GPUs; its fewest GPUs (one, unless min_gpus says more) per other job
        while they last, then each GPU to the largest drop in remaining time."""
        t0 = time.perf_counter()
        gpus_per_node = max(n.gpus for n in round_input.cluster.nodes)
        free = _FreeByType(round_input)
        counts, types = free.counts, free.types
        for job in round_input.jobs:
            if job.id not in counts:
                free.admit(job, job.min_gpus)

        def marginal_gain(job: JobSpec) -> float:
            r, gpu_type = counts[job.id], types[job.id]
            if job.pinned or r + 1 > job.max_gpus or free.left[gpu_type] < 1:
                return 0.0
            saved = (self.predicted_step_s(job, r, gpus_per_node, gpu_type)
                     - self.predicted_step_s(job, r + 1, gpus_per_node, gpu_type))
            return saved * (job.remaining_steps or 1.0)

        by_id = {j.id: j for j in round_input.jobs}
        gains = {k: marginal_gain(by_id[k]) for k in counts}
        while gains and max(gains.values()) > 0:
            best = max(gains, key=gains.__getitem__)
            counts[best] += 1
            free.take(types[best], 1)
            gains[best] = marginal_gain(by_id[best])
            if not free.left[types[best]]:  # that type is full: no job on it gains from one more GPU
                gains |= {k: 0.0 for k in gains if types[k] == types[best]}
        order = sorted(round_input.jobs, key=lambda j: counts.get(j.id, 0))
        return _result(round_input, self.name, _place(round_input, counts, types, order), t0)


@dataclass
class FifoPolicy:
    """First come first served at the requested GPU counts, without preemption or backfilling."""

    name: ClassVar[str] = "fifo"
    batch_mode: ClassVar[str] = "fixed"
    throughput_model: ClassVar[str] = "oracle"

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """Running jobs keep their GPUs; the oldest waiting jobs start while their requests fit."""
        t0 = time.perf_counter()
        # a running job stays on its GPUs, unless its batch cannot run on that many there (a
        # round handed over from another policy): then it queues again at its requested count.
        # A pinned job stays.
        free = _FreeByType(round_input)
        for job in round_input.jobs:
            if job.id in free.counts or not job.current_gpus:
                continue
            current = _gpu_type(round_input.cluster, job.current_gpus)
            if submitted_fits(job, len(job.current_gpus), current):
                free.give(job, len(job.current_gpus), current)
        for job in arrival_order(round_input.jobs):
            if job.id not in free.counts and not free.admit(job, job.gang_gpus):
                break
        return _result(round_input, self.name, _place(round_input, free.counts, free.types,
                                                      arrival_order(round_input.jobs)), t0)
