"""Measure training step time per local batch size, TorchBench-style.

For each batch size: a synthetic batch, `warmup` untimed training steps (forward, backward,
SGD step), then `steps` timed ones, each timed with CUDA events on a GPU (synchronized) or
perf_counter on CPU; the median is reported with the peak memory. Batch sizes are tried in
increasing order and measurement stops at the first that runs out of memory (CUDA OOM, or
above `max_memory_bytes` when given), so the table ends at the largest batch that fits.
With `frozen_groups`, the step is also timed with each prefix of the model's layer groups
frozen (requires_grad off: no backward and no gradient for them), at one batch size.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from schedlab.calibrate.zoo import ZooModel

__all__ = ["Measurement", "device_name", "measure", "time_steps"]


@dataclass(frozen=True)
class Measurement:
    """One model timed at one local batch and freeze level on one device (a row of a calibration table)."""

    model: str
    device: str
    gpu_type: str
    local_bsz: int
    frozen_groups: int
    step_time: float  # median seconds per training step
    samples_per_s: float
    peak_mem_mb: float
    steps: int
    param_bytes: float  # bytes of the trained (not frozen) parameters: what the all-reduce moves


def device_name(device: str) -> str:
    """The GPU type recorded in tables: the CUDA device name, or 'cpu-<threads>t'."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device)).replace(" ", "-")
    return f"cpu-{torch.get_num_threads()}t"


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _freeze(model: ZooModel, frozen: int) -> None:
    for k, group in enumerate(model.groups):
        for module in group:
            for p in module.parameters():
                p.requires_grad_(k >= frozen)


def time_steps(model: ZooModel, bsz: int, device: str, warmup: int, steps: int, seed: int = 0) -> tuple[list[float], float]:
    """Per-step seconds of `steps` timed training steps, and the peak memory in MB (CUDA only)."""
    gen = torch.Generator().manual_seed(seed)
    batch = model.batch(bsz, gen, device)
    params = [p for p in model.module.parameters() if p.requires_grad]
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for i in range(warmup + steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model.loss(model.module, batch).backward()
        opt.step()
        if cuda:
            end.record()
            torch.cuda.synchronize(device)
            elapsed = start.elapsed_time(end) / 1e3
        else:
            elapsed = time.perf_counter() - t0
        if i >= warmup:
            times.append(elapsed)
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if cuda else float("nan")
    return times, peak


def measure(model: ZooModel, batch_sizes: list[int], device: str = "cpu", warmup: int = 3, steps: int = 10,
            frozen_groups: bool = False, frozen_bsz: int | None = None,
            max_memory_bytes: float | None = None) -> list[Measurement]:
    """Median step time per batch size (stopping at the first that does not fit), then, with
    frozen_groups, per frozen prefix at frozen_bsz (default: the largest batch that fit)."""
    model.module.to(device).train()
    gpu = device_name(device)
    out: list[Measurement] = []

    def one(bsz: int, frozen: int) -> Measurement | None:
        _freeze(model, frozen)
        try:
            times, peak = time_steps(model, bsz, device, warmup, steps)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
            if not _is_oom(exc):
                raise
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            return None
        if max_memory_bytes is not None and peak * 2**20 > max_memory_bytes:
            return None
        med = statistics.median(times)
        trained = sum(p.numel() * p.element_size() for p in model.module.parameters() if p.requires_grad)
        return Measurement(model.name, device, gpu, bsz, frozen, med, bsz / med, peak, len(times), float(trained))

    for bsz in sorted(batch_sizes):
        m = one(bsz, 0)
        if m is None:
            break
        out.append(m)
    if frozen_groups and out:
        bsz = frozen_bsz or out[-1].local_bsz
        for k in range(1, len(model.groups)):
            m = one(bsz, k)
            if m is not None:
                out.append(m)
        _freeze(model, 0)
    return out
