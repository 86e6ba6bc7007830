"""Application profiles: what the round model needs to know about each shipped model.

A profile bundles, for one application of the Pollux artifact (measured on NVIDIA T4), the
throughput parameters fitted to its measured tables, the gradient statistics of its first
epoch at the initial batch, its batch limits and its completion epoch. The fitted parameters
ship in data/pollux/profiles.json so that importing schedlab fits nothing; regenerate them
with `python experiments/refit_profiles.py --refit` and tests check they match a fresh fit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from schedlab.models.throughput import (
    MeasuredTable,
    fit_throughput_params,
    params_to_list,
    rmsle,
    step_time_s,
)
from schedlab.state import BatchLimits, GradStats, ThroughputParams

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["APPLICATIONS", "MAX_EPOCHS", "MAX_LOCAL_BSZ_OVERRIDE", "POLLUX_GPU_TYPE", "ApplicationProfile", "data_dir",
           "fit_application", "measured_table", "profiles_path", "refit", "shipped_profiles", "table_fields",
           "trace_dir", "validation_tables"]

POLLUX_GPU_TYPE = "t4"  # the GPU type the artifact measured its tables on
# Completion epochs and the yolov3 micro-batch cap are the artifact's (simulator/applications.py).
MAX_EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50}
MAX_LOCAL_BSZ_OVERRIDE = {"yolov3": 8}
APPLICATIONS = tuple(sorted(MAX_EPOCHS))


@dataclass(frozen=True)
class ApplicationProfile:
    """What a round knows of one shipped application, as profiles.json holds it.

    Attributes
    ----------
    name
        The application (one of APPLICATIONS).
    gpu_type
        The GPU type its parameters were fitted on (POLLUX_GPU_TYPE).
    params
        Pollux's 7-parameter step-time model fitted to its measured tables (seconds).
    grad_stats
        Gradient statistics of its first epoch at the initial batch (models.efficiency).
    batch
        Batch limits in examples: the validated total batches' range and the measured local
        batches' (the largest MAX_LOCAL_BSZ_OVERRIDE's where it names the application).
    max_epochs
        The epoch at which it completes (MAX_EPOCHS, the artifact's).
    fit_rmsle
        The fit's step-time RMSLE over every measured point (~ its relative error).
    """

    name: str
    gpu_type: str
    params: ThroughputParams
    grad_stats: GradStats
    batch: BatchLimits
    max_epochs: int
    fit_rmsle: float


def data_dir() -> Path:
    """The package's shipped data folder, schedlab/data."""
    return Path(str(resources.files("schedlab") / "data"))


def trace_dir(app: str) -> Path:
    """An application's measured tables in the Pollux artifact (placements, scalability, validation)."""
    return data_dir() / "pollux" / "traces" / app


def validation_tables(app: str) -> dict[int, pd.DataFrame]:
    """The validation-<bsz>.csv tables of one application, keyed by total batch size, ascending.

    Each holds, one row per epoch of training at that total batch, the progress, validation
    metric and gradient statistics measured; the smallest batch is the initial one (`table_fields`).
    """
    import pandas as pd  # here: reading the profiles for a round needs no pandas

    tables = {int(p.stem.split("-")[1]): pd.read_csv(p) for p in trace_dir(app).glob("validation-*.csv")}
    return dict(sorted(tables.items()))


@cache
def measured_table(app: str) -> MeasuredTable:
    """An application's measured step and sync times (its placements and scalability tables), read once."""
    return MeasuredTable.from_dir(trace_dir(app))


def fit_application(app: str) -> tuple[ThroughputParams, float]:
    """Fit the throughput model to every measured point of an application.

    Returns
    -------
    params : ThroughputParams
        Pollux's 7 parameters fitted to the measured step and sync times (models.throughput).
    rmsle : float
        The fitted model's step-time RMSLE over those points.
    """
    pts = measured_table(app).points()
    params = fit_throughput_params(pts.num_nodes, pts.num_replicas, pts.local_bsz, pts.step_time, pts.sync_time)
    pred = step_time_s(params, pts.num_nodes.to_numpy(), pts.num_replicas.to_numpy(), pts.local_bsz.to_numpy())
    return params, rmsle(pred, pts.step_time.to_numpy())


def table_fields(app: str) -> dict[str, list]:
    """What the measured tables give a profile besides its fit, as profiles.json holds it.

    Returns
    -------
    dict
        "grad_stats": [grad_sqr, grad_var] of the first epoch at the initial batch (the
        smallest validated one); "batch": [init_bsz, max_bsz, min_local_bsz, max_local_bsz],
        the validated total batches' range and the measured local batches', the largest
        replaced by MAX_LOCAL_BSZ_OVERRIDE's where it names the application (the artifact's
        micro-batch cap).
    """
    validation = validation_tables(app)
    init_bsz, max_bsz = min(validation), max(validation)
    first_epoch = validation[init_bsz].iloc[0]
    local = measured_table(app).placements.local_bsz
    return {"grad_stats": [float(first_epoch.grad_sqr), float(first_epoch.grad_var)],
            "batch": [init_bsz, max_bsz, int(local.min()), MAX_LOCAL_BSZ_OVERRIDE.get(app, int(local.max()))]}


def profiles_path() -> Path:
    """The shipped profiles.json: what `shipped_profiles` reads and `refit` regenerates."""
    return data_dir() / "pollux" / "profiles.json"


@cache
def shipped_profiles() -> dict[str, ApplicationProfile]:
    """The six Pollux applications, name -> profile, as profiles.json holds them.

    The fitted parameters and what the tables give were written by `refit`: reading them needs
    no table, so no pandas and no fit. Read once per process.
    """
    shipped = json.loads(profiles_path().read_text())
    return {app: ApplicationProfile(app, POLLUX_GPU_TYPE, ThroughputParams(*shipped[app]["params"]),
                                    GradStats(*shipped[app]["grad_stats"]), BatchLimits(*shipped[app]["batch"]),
                                    MAX_EPOCHS[app], shipped[app]["fit_rmsle"])
            for app in APPLICATIONS}


def refit() -> dict[str, dict]:
    """Every application's profile fitted afresh from its measured tables, as profiles.json holds it."""
    out = {}
    for app in APPLICATIONS:
        params, err = fit_application(app)
        out[app] = {"params": params_to_list(params), "fit_rmsle": err, **table_fields(app)}
    return out


