"""Measure training step time per local batch size, TorchBench-style.

For each batch size: a synthetic batch, `warmup` untimed training steps (forward, backward,
SGD step), then `steps` timed ones, each timed with CUDA events on a GPU (synchronized) or
perf_counter on CPU; the median is reported with the peak memory. Batch sizes are tried in
increasing order and measurement stops at the first that runs out of memory (CUDA OOM, or
above `max_memory_bytes` when given), so the table ends at the largest batch that fits.
With `frozen_groups`, the step is also timed with each prefix of the model's layer groups
frozen (requires_grad off: no backward and no gradient for them), at one batch size.
Precision (PRECISIONS): "fp32" trains in float32 (PyTorch's defaults: TF32 for convolutions, not
for matrix products); "bf16" is automatic mixed precision, the forward pass and loss under
torch.autocast in bfloat16 with float32 weights, gradients and optimizer (no loss scaling:
bfloat16 has float32's range).
"""

from __future__ import annotations

import statistics
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from schedlab.calibrate.zoo import ZooModel

__all__ = ["PRECISIONS", "Measurement", "device_name", "measure", "time_steps"]

# precision -> the forward pass's autocast dtype (None: no autocast)
PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "bf16": torch.bfloat16}


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
    precision: str = "fp32"  # a key of PRECISIONS


def device_name(device: str) -> str:
    """The GPU type recorded in tables: the CUDA device name, or 'cpu-<threads>t'."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device)).replace(" ", "-")
    return f"cpu-{torch.get_num_threads()}t"


def _is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _freeze(model: ZooModel, frozen: int) -> None:
    """Train only the parameters of groups `frozen` and after. A parameter shared by several groups
    (GPT-2's output projection is its token embedding) is frozen with the first group that uses it:
    set per group in turn, the last group's use would train the embedding, and every layer's
    backward would run again to reach it."""
    first: dict[int, tuple[int, torch.nn.Parameter]] = {}
    for k, group in enumerate(model.groups):
        for module in group:
            for p in module.parameters():
                first.setdefault(id(p), (k, p))
    for k, p in first.values():
        p.requires_grad_(k >= frozen)


def _autocast(device: str, precision: str) -> AbstractContextManager:
    """The forward pass's precision context (module docstring)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    dtype = PRECISIONS[precision]
    return nullcontext() if dtype is None else torch.autocast(torch.device(device).type, dtype=dtype)


def time_steps(model: ZooModel, bsz: int, device: str, warmup: int, steps: int, seed: int = 0,
               precision: str = "fp32") -> tuple[list[float], float]:
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
        with _autocast(device, precision):
            loss = model.loss(model.module, batch)
        loss.backward()
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
            max_memory_bytes: float | None = None, precision: str = "fp32") -> list[Measurement]:
    """Median step time per batch size (stopping at the first that does not fit), then, with
    frozen_groups, per frozen prefix at frozen_bsz (default: the largest batch that fit), all in
    one precision (PRECISIONS)."""
    model.module.to(device).train()
    gpu = device_name(device)
    out: list[Measurement] = []

    def one(bsz: int, frozen: int) -> Measurement | None:
        _freeze(model, frozen)
        try:
            times, peak = time_steps(model, bsz, device, warmup, steps, precision=precision)
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
        return Measurement(model.name, device, gpu, bsz, frozen, med, bsz / med, peak, len(times), float(trained),
                           precision)

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
