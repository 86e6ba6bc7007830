"""The classic baselines, as the Pollux artifact runs them (simulator/tiresias.py, optimus.py).

All three train every job at the batch size its user submitted (JobSpec.submitted_bsz), split
within its batch limits on the type of its GPUs (JobSpec.batch_on), and place new work greedily
on the nodes with the most free GPUs (of the types where that split fits, for a job with limits
by type); a job that keeps its GPU count keeps its GPUs, and a pinned job (JobSpec.pinned) keeps
its GPUs and runs first. An allocation on a type the job's parameters were projected for says
so (JobAllocation.projected).

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
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import lru_cache
from typing import ClassVar

from schedlab.formulations.packing import NodeState
from schedlab.models.efficiency import goodput, split_fixed_batch, submitted_split
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


def _params(job: JobSpec) -> ThroughputParams:
    """The job's throughput model (these baselines run one GPU type)."""
    return next(iter(job.throughput.values()))


def fixed_allocation(job: JobSpec, gpus: tuple[GpuRef, ...], gpu_type: str) -> JobAllocation:
    """The allocation of a job training at its submitted batch on `gpus`, of `gpu_type`."""
    if not gpus:
        return JobAllocation(job.id)
    r = len(gpus)
    micro, accum, value = _fixed_run(_params(job), job.grad_stats, job.batch_on(gpu_type), job.submitted_bsz,
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
    cluster = round_input.cluster
    allocations = tuple(fixed_allocation(j, gpus.get(j.id, ()), _type_of(cluster, gpus.get(j.id, ())))
                        for j in round_input.jobs)
    verify(round_input, allocations)
    return RoundResult(allocations, HEURISTIC, name, math.nan, math.nan, math.nan, 0.0,
                       time.perf_counter() - t0, True)


def _type_of(cluster: Cluster, gpus: tuple[GpuRef, ...]) -> str:
    """The GPU type of `gpus`' first node ("" for none)."""
    return cluster.nodes[cluster.node_index[gpus[0].node]].gpu_type if gpus else ""


def _pinned_counts(round_input: RoundInput) -> dict[str, int]:
    """The pinned jobs and the GPUs each keeps."""
    return {j.id: len(j.current_gpus) for j in round_input.jobs if j.pinned}


def _place(round_input: RoundInput, counts: dict[str, int], order: list[JobSpec]) -> dict[str, tuple[GpuRef, ...]]:
    """Keep the GPUs of pinned jobs and of jobs whose count is unchanged; place the others in
    `order`, each on the nodes where its batch fits (`_fitting_nodes`); one that finds too few
    GPUs free there waits."""
    kept = {j.id: j.current_gpus for j in round_input.jobs
            if j.current_gpus and (j.pinned or len(j.current_gpus) == counts.get(j.id, 0))}
    free = NodeState(round_input.cluster)
    for gpus in kept.values():
        free.take_exact(gpus)
    out = dict(kept)
    for job in order:
        if counts.get(job.id, 0) and job.id not in out:
            nodes = _fitting_nodes(round_input.cluster, job, counts[job.id])
            if nodes is None:
                out[job.id] = free.take_most_free(counts[job.id])
            elif sum(len(free.free[k]) for k in nodes) >= counts[job.id]:
                out[job.id] = free.take_most_free(counts[job.id], nodes)
    return out


def _fitting_nodes(cluster: Cluster, job: JobSpec, num_gpus: int) -> tuple[int, ...] | None:
    """The nodes (indices) of the types on which the job's batch fits on num_gpus GPUs; None, all
    nodes alike, for a job without limits by type."""
    if not job.batch_by_type:
        return None
    return tuple(k for k, n in enumerate(cluster.nodes) if _runs_its_batch_on(job, num_gpus, n.gpu_type))


def _runs_its_batch_on(job: JobSpec, num_gpus: int, gpu_type: str) -> bool:
    """Whether the job's submitted batch splits over num_gpus GPUs of `gpu_type` within its per-GPU limits there."""
    micro, _ = submitted_split(job, num_gpus, gpu_type)
    limits = job.batch_on(gpu_type)
    return limits.min_local_bsz <= micro <= limits.max_local_bsz


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
        """Pinned jobs on their GPUs; then queue 0 and queue 1: each job runs on its requested GPUs
        if they are left, else waits."""
        t0 = time.perf_counter()
        jobs = arrival_order(round_input.jobs)
        for job in jobs:
            if job.attained_service_gpu_s >= self.threshold_gpu_s and job.id not in self._demoted:
                self._demoted[job.id] = len(self._demoted)
        queue0 = [j for j in jobs if j.id not in self._demoted]
        queue1 = sorted((j for j in jobs if j.id in self._demoted), key=lambda j: self._demoted[j.id])
        counts = _pinned_counts(round_input)
        left = round_input.cluster.total_gpus - sum(counts.values())
        for job in queue0 + queue1:
            if job.id not in counts and job.gang_gpus <= left:
                counts[job.id] = job.gang_gpus
                left -= counts[job.id]
        return _result(round_input, self.name, _place(round_input, counts, queue0 + queue1), t0)


@dataclass
class OptimusPolicy:
    """Optimus with the Pollux artifact's oracle: GPUs where they shorten the predicted remaining time most."""

    name: ClassVar[str] = "optimus"
    batch_mode: ClassVar[str] = "fixed"
    throughput_model: ClassVar[str] = "oracle"

    @staticmethod
    def predicted_step_s(job: JobSpec, num_replicas: int, gpus_per_node: int) -> float:
        """Seconds per step at the submitted batch on `num_replicas` GPUs over the fewest nodes."""
        return _packed_step_s(_params(job), job.batch, job.submitted_bsz, num_replicas, gpus_per_node)

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """Pinned jobs on their GPUs; one GPU per other job while they last, then each GPU to the
        largest drop in remaining time."""
        t0 = time.perf_counter()
        gpus_per_node = max(n.gpus for n in round_input.cluster.nodes)
        pinned = _pinned_counts(round_input)
        left = round_input.cluster.total_gpus - sum(pinned.values())
        counts: dict[str, int] = {}
        for job in round_input.jobs:
            if job.id not in pinned and left >= 1:
                counts[job.id], left = 1, left - 1

        def marginal_gain(job: JobSpec) -> float:
            r = counts[job.id]
            if r + 1 > job.max_gpus:
                return 0.0
            saved = self.predicted_step_s(job, r, gpus_per_node) - self.predicted_step_s(job, r + 1, gpus_per_node)
            return saved * (job.remaining_steps or 1.0)

        by_id = {j.id: j for j in round_input.jobs}
        gains = {k: marginal_gain(by_id[k]) for k in counts}
        while left > 0 and gains and max(gains.values()) > 0:
            best = max(gains, key=gains.__getitem__)
            counts[best] += 1
            left -= 1
            gains[best] = marginal_gain(by_id[best])
        counts |= pinned
        order = sorted(round_input.jobs, key=lambda j: counts.get(j.id, 0))
        return _result(round_input, self.name, _place(round_input, counts, order), t0)


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
        cluster = round_input.cluster
        counts = {j.id: len(j.current_gpus) for j in round_input.jobs if j.current_gpus and (
            j.pinned or _runs_its_batch_on(j, len(j.current_gpus), _type_of(cluster, j.current_gpus)))}
        left = round_input.cluster.total_gpus - sum(counts.values())
        for job in arrival_order(round_input.jobs):
            if job.id in counts:
                continue
            if job.gang_gpus > left:
                break
            counts[job.id] = job.gang_gpus
            left -= counts[job.id]
        return _result(round_input, self.name, _place(round_input, counts, arrival_order(round_input.jobs)), t0)
