"""The simulated world of a replay: what each application really does, from measurements.

The six applications Pollux measured (Qiao et al., "Pollux: Co-adaptive Cluster Scheduling for
Goodput-Optimized Deep Learning", OSDI'21): cifar10, imagenet, deepspeech2, yolov3, ncf, bert.
Follows its artifact's simulator (petuum/adaptdl, osdi21-artifact, applications.py):
- step and sync time come from the measured tables (models.throughput.MeasuredTable: the
  placement looked up and interpolated over local batch, other placements interpolated over
  (nodes, replicas, local batch));
- per-epoch gradient statistics, iteration counts and progress come from validation-<bsz>.csv,
  interpolated linearly between the two measured batch sizes around the job's batch;
- progress is counted in the validation files' unit (M0-equivalent steps); epoch e ends when
  progress reaches the smallest progress[e - 1] over the files, and a job completes when it
  finishes its last epoch (max_epochs, the artifact's completion epoch + 1).
What we changed: nothing in the semantics; lookups are cached per application.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache, cached_property, lru_cache

import numpy as np
import pandas as pd

from schedlab.models.efficiency import split_fixed_batch
from schedlab.models.profiles import MAX_EPOCHS, MAX_LOCAL_BSZ_OVERRIDE, measured_table, validation_tables
from schedlab.models.throughput import MeasuredTable
from schedlab.state import BatchLimits, GradStats

__all__ = ["ApplicationTruth", "BatchSplit", "application_truth", "calibrated_truth"]

_EPS = 1e-8


@dataclass(frozen=True)
class BatchSplit:
    """How a total batch runs on r GPUs: micro-batch per GPU and extra accumulation steps."""

    local_bsz: int
    accum_steps: int

    def total_bsz(self, num_replicas: int) -> int:
        """The total batch of one optimizer step on `num_replicas` GPUs.

        Examples
        --------
        >>> BatchSplit(local_bsz=32, accum_steps=1).total_bsz(4)
        256
        """
        return num_replicas * self.local_bsz * (self.accum_steps + 1)


class ApplicationTruth:
    """Measured behaviour of one application (one folder of the Pollux traces).

    Step and sync times from `table` (a measured or calibrated MeasuredTable), per-epoch
    gradient statistics, iterations and progress from `validation` (total batch -> the
    validation-<bsz>.csv table), `max_epochs` epochs to completion; `max_local_bsz` overrides the
    largest micro-batch the table measured. application_truth builds the shipped ones.
    """

    def __init__(self, name: str, table: MeasuredTable, validation: dict[int, pd.DataFrame],
                 max_epochs: int, max_local_bsz: int | None = None):
        self.name = name
        self.table = table
        self.validation = dict(sorted(validation.items()))
        self.batch_sizes = np.array(list(self.validation), dtype=float)
        self.init_bsz = int(self.batch_sizes[0])
        self.max_bsz = int(self.batch_sizes[-1])
        self.min_local_bsz = int(table.placements.local_bsz.min())
        self.max_local_bsz = int(max_local_bsz or table.placements.local_bsz.max())
        self.max_epochs = max_epochs
        # columns stacked as (batch size, epoch) arrays for vectorized interpolation
        self._grad_sqr = np.stack([df.grad_sqr.to_numpy(float) for df in self.validation.values()])
        self._grad_var = np.stack([df.grad_var.to_numpy(float) for df in self.validation.values()])
        self._iteration = np.stack([df.iteration.to_numpy(float) for df in self.validation.values()])
        self._epoch_progress = np.min([df.progress.to_numpy(float) for df in self.validation.values()], axis=0)

    def _interp(self, table: np.ndarray, total_bsz: float, epoch: int) -> float:
        if not self.init_bsz <= total_bsz <= self.max_bsz:
            raise ValueError(f"{self.name}: batch {total_bsz} outside the validated [{self.init_bsz}, {self.max_bsz}]")
        return float(np.interp(total_bsz, self.batch_sizes, table[:, epoch]))

    def grad_stats(self, total_bsz: float, epoch: int) -> GradStats:
        """Gradient statistics measured during `epoch` at this total batch."""
        return _cached_grad_stats(self, total_bsz, epoch)

    def iterations(self, total_bsz: float, epoch: int) -> float:
        """Optimizer steps taken by the end of `epoch` (0-based) at this total batch."""
        return _cached_iterations(self, total_bsz, epoch)

    def progress_at_epoch(self, epoch: int) -> float:
        """Progress at which `epoch` epochs are done (0 for epoch 0)."""
        return 0.0 if epoch == 0 else float(self._epoch_progress[epoch - 1])

    @cached_property
    def completion_progress(self) -> float:
        """Progress at which the job completes (all max_epochs epochs done)."""
        return self.progress_at_epoch(self.max_epochs)

    def step_sync_s(self, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
        """(step, sync) seconds of one optimizer step without accumulation.

        `placement` lists the job's GPUs on each node, `local_bsz` is the micro-batch per GPU;
        the measured table's answer (models.throughput.MeasuredTable.step_sync_s), cached.
        """
        return _cached_step_sync(self, tuple(placement), float(local_bsz))

    def step_time_s(self, placement: tuple[int, ...], split: BatchSplit) -> float:
        """One optimizer step with accumulation: s micro-steps of compute plus the synced one."""
        step, sync = self.step_sync_s(placement, split.local_bsz)
        return step + (step - sync) * split.accum_steps

    @cached_property
    def limits(self) -> BatchLimits:
        """The batch sizes it runs.

        The initial and largest total batch (the validated ones), the smallest and largest
        micro-batch per GPU.
        """
        return BatchLimits(self.init_bsz, self.max_bsz, self.min_local_bsz, self.max_local_bsz)

    def split_fixed_batch(self, total_bsz: int, num_replicas: int) -> BatchSplit:
        """How a user-fixed total batch runs on `num_replicas` GPUs (models.efficiency.split_fixed_batch)."""
        return BatchSplit(*split_fixed_batch(total_bsz, num_replicas, self.limits))

    @cache  # noqa: B019 (a truth lives as long as the process: one per application, itself cached)
    def configurations(self, lo_util: float = 0.5, hi_util: float = 0.8, gpus_per_node: int = 4) -> list[tuple[int, int]]:
        """(replicas, batch) requests a user would plausibly make: the artifact's workload
        generator keeps the replica counts whose scaling efficiency against one GPU, at each
        count's fastest validated batch, lies in [lo_util, hi_util] (time-to-completion < 12 h)."""
        out: list[tuple[int, int]] = []
        base_s, base_bsz = math.inf, self.init_bsz  # one GPU's fastest batch and its time
        for r in (1, 2, 4, 6, 8, 12, 16, 24, 32, 48):
            if r * self.min_local_bsz > self.max_bsz:
                break
            placement = tuple(min(gpus_per_node, r - k) for k in range(0, r, gpus_per_node))
            best: tuple[float, int] | None = None
            for bsz in self.validation:
                if math.ceil(bsz / r - _EPS) < self.min_local_bsz:
                    continue
                split = self.split_fixed_batch(bsz, r) if r > 1 else _split_no_forced_accum(self, bsz)
                jct = self.iterations(bsz, self.max_epochs - 1) * self.step_time_s(placement, split)
                if best is None or jct < best[0]:
                    best = (jct, bsz)
            if best is None:  # no validated batch runs on r GPUs
                continue
            if r == 1:
                base_s, base_bsz = best
            elif best[0] < 12 * 3600 and lo_util < base_s / best[0] / r < hi_util:
                out.append((r, best[1]))
        return out or [(1, base_bsz)]


def _split_no_forced_accum(truth: ApplicationTruth, total_bsz: int) -> BatchSplit:
    accum = math.ceil(total_bsz / truth.max_local_bsz - _EPS) - 1
    return BatchSplit(math.ceil(total_bsz / (accum + 1) - _EPS), accum)


# Replays ask these for the same (batch, epoch) of an application again and again: every job of
# it, every round; memoized like the step times.
@lru_cache(maxsize=1 << 18)
def _cached_grad_stats(truth: ApplicationTruth, total_bsz: float, epoch: int) -> GradStats:
    return GradStats(truth._interp(truth._grad_sqr, total_bsz, epoch), truth._interp(truth._grad_var, total_bsz, epoch))


@lru_cache(maxsize=1 << 18)
def _cached_iterations(truth: ApplicationTruth, total_bsz: float, epoch: int) -> float:
    return truth._interp(truth._iteration, total_bsz, epoch)


@cache
def _cached_step_sync(truth: ApplicationTruth, placement: tuple[int, ...], local_bsz: float) -> tuple[float, float]:
    return truth.table.step_sync_s(placement, local_bsz)


@cache
def application_truth(name: str) -> ApplicationTruth:
    """The shipped measurements of one Pollux application."""
    return ApplicationTruth(name, measured_table(name), validation_tables(name), MAX_EPOCHS[name],
                            MAX_LOCAL_BSZ_OVERRIDE.get(name))


@cache
def calibrated_truth(name: str, table: MeasuredTable) -> ApplicationTruth:
    """An application whose step and sync times come from a calibration table (schedlab
    calibrate), with the shipped gradient statistics and epochs of the Pollux application."""
    return ApplicationTruth(name, table, validation_tables(name), MAX_EPOCHS[name])
