"""Calibration tables: written from measurements, fitted to Pollux's model, used as profiles.

A table is a CSV with one row per (model, precision, placement, local batch, frozen groups): the
columns of Pollux's placements.csv (placement, local_bsz, step_time, sync_time), which the
replay's MeasuredTable reads, plus model, gpu_type, device, num_nodes, num_replicas,
frozen_groups, samples_per_s, peak_mem_mb, source and precision (a table written before
precisions were measured is fp32). Measured rows have placement "1" (one GPU, no sync).
Multi-GPU rows, which one GPU cannot measure, come from the ring all-reduce model
(source "allreduce-model"):
    sync_s = 2 (r - 1) / r * bytes / bandwidth + 2 (r - 1) * latency
with the NVLink bandwidth inside a node and the network's across nodes (the slowest link of
the ring), and step_s = compute_s + sync_s (no overlap: Pollux's gamma fit absorbs overlap
when real multi-GPU tables are used instead).
Importing this module does not need torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.models.throughput import MeasuredTable, fit_throughput_params, rmsle, step_time_s
from schedlab.state import ThroughputParams

COLUMNS = ["model", "gpu_type", "device", "placement", "num_nodes", "num_replicas", "local_bsz", "frozen_groups",
           "step_time", "sync_time", "samples_per_s", "peak_mem_mb", "param_bytes", "source", "precision"]
# Multi-GPU placements of the all-reduce rows: 1, 4 and 8 GPUs a node on up to 16 nodes, so that
# MeasuredTable's interpolation over (nodes, replicas, batch) covers every job of a 16-node
# cluster of 4- or 8-GPU nodes (Pollux's simulator stops at 16 nodes too).
DEFAULT_PLACEMENTS = ("2", "4", "8", "11", "44", "88", "4444", "4" * 8, "1" * 16, "4" * 16, "8" * 16)
# The fit's least time parameter: below Pollux's 1e-8 s, which an H100 beats per NCF sample (2.7 ns);
# at 1e-8 that fit's step-time RMSLE is 0.44, at 1e-12 0.15.
FIT_FLOOR_S = 1e-12
# The Pollux application each zoo model (calibrate.zoo) stands for: its tables can be that
# application's ground truth, and models.freezing has its layer profile.
ZOO_APPLICATIONS = {"resnet18": "cifar10", "resnet50": "imagenet", "bert-base": "bert", "ncf": "ncf"}

__all__ = ["COLUMNS", "DEFAULT_PLACEMENTS", "FIT_FLOOR_S", "ZOO_APPLICATIONS", "AllReduceModel", "Fit", "fit_table",
           "measured_table", "read_table", "table_frame", "write_table"]


@dataclass(frozen=True)
class AllReduceModel:
    """Ring all-reduce cost. Defaults: NVLink 2 (V100, ~130 GB/s bus bandwidth per GPU) inside
    a node, 25 Gbit/s Ethernet (3.125 GB/s) across nodes, 10 us per ring hop."""

    intra_node_gbps: float = 130.0  # GB/s
    inter_node_gbps: float = 3.125  # GB/s
    latency_s: float = 10e-6

    def sync_s(self, param_bytes: float, num_nodes: int, num_replicas: int) -> float:
        """Seconds of one ring all-reduce of `param_bytes` bytes over `num_replicas` GPUs.

        2 (r - 1) / r * bytes / bandwidth + 2 (r - 1) * latency, at the network's bandwidth when
        the ring spans nodes; 0 on one GPU.

        Examples
        --------
        ResNet-18's 11.2 M float32 parameters on four GPUs of one node, then on eight over two
        nodes, in milliseconds:

        >>> model = AllReduceModel()
        >>> print(f"{model.sync_s(44.7e6, 1, 4) * 1e3:.2f} {model.sync_s(44.7e6, 2, 8) * 1e3:.2f}")
        0.58 25.17
        """
        if num_replicas <= 1:
            return 0.0
        bandwidth = (self.inter_node_gbps if num_nodes > 1 else self.intra_node_gbps) * 1e9
        r = num_replicas
        return 2 * (r - 1) / r * param_bytes / bandwidth + 2 * (r - 1) * self.latency_s


def table_frame(measurements, allreduce: AllReduceModel = AllReduceModel(),
                placements: tuple[str, ...] = DEFAULT_PLACEMENTS) -> pd.DataFrame:
    """Measured rows (placement "1") and all-reduce-model rows for the other placements."""
    rows = []
    for m in measurements:
        base = asdict(m)
        rows.append({**base, "placement": "1", "num_nodes": 1, "num_replicas": 1, "sync_time": 0.0, "source": "measured"})
        if m.frozen_groups:
            continue
        for placement in placements:
            nodes, replicas = len(placement), sum(int(c) for c in placement)
            sync = allreduce.sync_s(m.param_bytes, nodes, replicas)
            step = m.step_time + sync
            rows.append({**base, "placement": placement, "num_nodes": nodes, "num_replicas": replicas,
                         "step_time": step, "sync_time": sync, "samples_per_s": replicas * m.local_bsz / step,
                         "source": "allreduce-model"})
    return pd.DataFrame(rows)[COLUMNS]


def write_table(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write a calibration table as CSV (its folder created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return path


def read_table(path: str | Path) -> pd.DataFrame:
    """A calibration table from CSV, placements kept as text; ValueError if a column is missing."""
    frame = pd.read_csv(path, dtype={"placement": str})
    if "precision" not in frame.columns:  # the harness measured fp32 alone before it had the column
        frame["precision"] = "fp32"
    missing = set(COLUMNS) - set(frame.columns)
    if missing:
        raise ValueError(f"{path}: not a calibration table, missing columns {sorted(missing)}")
    return frame


@dataclass(frozen=True)
class Fit:
    """Pollux's throughput model fitted to one model's unfrozen rows on one GPU type in one precision."""

    model: str
    gpu_type: str
    precision: str
    params: ThroughputParams
    rmsle: float  # step time, over every unfrozen row
    points: int


def fit_table(frame: pd.DataFrame, seed: int = 0) -> list[Fit]:
    """Pollux's throughput model fitted to each model's unfrozen rows per GPU type and precision,
    with its RMSLE."""
    out = []
    keys = ["model", "gpu_type", "precision"]
    for (model, gpu, precision), df in frame[frame.frozen_groups == 0].groupby(keys, sort=False):
        n, r, m, step, sync = (df[c].to_numpy(float) for c in ("num_nodes", "num_replicas", "local_bsz", "step_time",
                                                               "sync_time"))
        params = fit_throughput_params(n, r, m, step, sync, rng=np.random.default_rng(seed), floor_s=FIT_FLOOR_S)
        out.append(Fit(str(model), str(gpu), str(precision), params, rmsle(step_time_s(params, n, r, m), step), len(df)))
    return out


def measured_table(frame: pd.DataFrame, model: str, precision: str = "fp32") -> MeasuredTable:
    """One model's unfrozen rows in one precision as the replay's MeasuredTable (its ground-truth
    step times)."""
    df = frame[(frame.model == model) & (frame.frozen_groups == 0) & (frame.precision == precision)]
    if df.empty:
        have = sorted(set(zip(frame.model, frame.precision)))
        raise ValueError(f"no unfrozen rows for model {model!r} in {precision}; (model, precision) pairs: {have}")
    placements = df[["placement", "local_bsz", "step_time", "sync_time"]].reset_index(drop=True)
    scalability = pd.DataFrame(columns=["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"])
    return MeasuredTable(placements, scalability)
