"""What a job of Gavel's really does, and how a round presents it (Gavel's simulator semantics).

Gavel's simulator (stanford-futuredata/gavel, scheduler/scheduler.py, `simulate`) runs rigid
jobs: a job type (a model at a batch per GPU) on exactly its scale factor's GPUs, all of one
type, at that batch, until it has made its steps; in rounds of 360 s; a job on GPUs of type t
makes the table's steps per second (models.gavel.steps_per_s) and finishes at the exact instant
its steps are done. Here the rate depends on where its GPUs are: the consolidated rate on one
node, the `_unconsolidated` rate across nodes. What we changed: Gavel's simulator charges the
consolidated rate wherever its strided placement put the GPUs (it never reads the
`_unconsolidated` keys); a scheduler here may spread a job, so it runs at the rate Gavel
measured for a spread job. Gavel's scripts default to one GPU per server, where that rule
would spread every multi-GPU job; the gavel world (sim.world.WORLDS) has servers of 4. Gavel
starts its next round early when every running job has finished; here every round is 360 s.

A round sees the job with Pollux's model fitted to the table for every GPU type it runs on
(models.gavel.shipped_params), on exactly its scale factor, at its one batch (gain 1), so every
policy of the registry can schedule it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, cached_property

from schedlab.errors import ConfigError
from schedlab.models.efficiency import split_fixed_batch
from schedlab.models.gavel import gavel_table, per_gpu_batch, shipped_params, steps_per_s
from schedlab.sim.jobs import JobState
from schedlab.sim.truth import BatchSplit
from schedlab.state import BatchLimits, GradStats, JobSpec, ThroughputParams

__all__ = ["RIGID_GRAD", "GavelTruth", "gavel_spec", "gavel_truth"]

# A rigid job trains at one batch: any gradient statistics give it gain 1 (its initial batch is its batch)
RIGID_GRAD = GradStats(sqr=1.0, var=0.0)


@dataclass(frozen=True)
class GavelTruth:
    """A job type of Gavel's at one scale factor: its batch and its steps per second.

    Attributes
    ----------
    job_type
        Gavel's name of the model and batch, e.g. "ResNet-50 (batch size 64)".
    scale_factor
        Its GPUs.
    per_gpu_bsz
        The batch of each GPU (models.gavel.per_gpu_batch).
    rates
        (GPU type, consolidated) -> steps per second alone, for the GPU types it runs on.
    params
        GPU type -> Pollux's model fitted to the table, for the same GPU types.
    """

    job_type: str
    scale_factor: int
    per_gpu_bsz: int
    rates: tuple[tuple[tuple[str, bool], float], ...]
    params: tuple[tuple[str, ThroughputParams], ...]

    # cached: every round asks for each live job's (a frozen dataclass without slots keeps
    # cached_property's value in its __dict__, outside the fields)
    @cached_property
    def throughput(self) -> dict[str, ThroughputParams]:
        """GPU type -> its fitted model, as a JobSpec holds it (do not mutate: shared)."""
        return dict(self.params)

    @cached_property
    def _rate(self) -> dict[tuple[str, bool], float]:
        return dict(self.rates)

    @property
    def total_bsz(self) -> int:
        """The batch of one step over its GPUs."""
        return self.scale_factor * self.per_gpu_bsz

    @property
    def init_bsz(self) -> int:
        """Its batch (it trains at no other)."""
        return self.total_bsz

    @property
    def min_local_bsz(self) -> int:
        """Its batch per GPU."""
        return self.per_gpu_bsz

    @cached_property
    def limits(self) -> BatchLimits:
        """Its one batch: total and per GPU."""
        return BatchLimits(self.total_bsz, self.total_bsz, self.per_gpu_bsz, self.per_gpu_bsz)

    def split_fixed_batch(self, total_bsz: int, num_replicas: int) -> BatchSplit:
        """How a total batch runs on `num_replicas` GPUs (models.efficiency.split_fixed_batch)."""
        return BatchSplit(*split_fixed_batch(total_bsz, num_replicas, self.limits))

    def steps_per_s(self, gpu_type: str, consolidated: bool) -> float:
        """Steps per second on GPUs of `gpu_type`, on one node or across nodes (0: it does not run there)."""
        return self._rate.get((gpu_type, consolidated), 0.0)

    @property
    def best_steps_per_s(self) -> float:
        """Its fastest rate: consolidated on its fastest GPU type."""
        return max(rate for (_, consolidated), rate in self.rates if consolidated)


@cache
def gavel_truth(job_type: str, scale_factor: int) -> GavelTruth:
    """The truth of a job type at a scale factor, on every GPU type of Gavel's table it runs on."""
    fits = shipped_params().get(job_type, {})
    types = [t for t in gavel_table().gpu_types if steps_per_s(job_type, scale_factor, t, True) and t in fits]
    if not types:
        raise ConfigError(f"job type {job_type!r} at {scale_factor} GPUs runs on no GPU type of Gavel's table")
    rates = tuple(((t, c), steps_per_s(job_type, scale_factor, t, c)) for t in types for c in (True, False))
    return GavelTruth(job_type, scale_factor, per_gpu_batch(job_type), rates, tuple((t, fits[t].params) for t in types))


def gavel_spec(state: JobState, truth: GavelTruth, remaining_steps: float, now_s: float) -> JobSpec:
    """The job as a round presents it: its fitted model per GPU type, exactly its scale factor's
    GPUs at its one batch, its age, service and steps left. It names no application: a round
    takes only the shipped Pollux applications' names (its model is inline)."""
    job = state.job
    return JobSpec(
        id=job.name,
        throughput=truth.throughput,
        grad_stats=RIGID_GRAD,
        batch=truth.limits,
        min_gpus=truth.scale_factor,
        max_gpus=truth.scale_factor,
        current_gpus=state.gpus,
        age_s=now_s - job.submit_s,
        num_restarts=state.num_restarts,
        fixed_bsz=truth.total_bsz,
        requested_gpus=truth.scale_factor,
        requested_bsz=truth.total_bsz,
        attained_service_gpu_s=state.attained_gpu_s,
        remaining_steps=remaining_steps,
    )
