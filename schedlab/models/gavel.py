"""Gavel's measured throughput table, read as Gavel reads it, and Pollux's model fitted to it.

Gavel (Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning
Workloads", OSDI'20) measured the steps per second of 26 job types (a model at a batch per GPU)
at scale factors (GPUs) 1, 2, 4 and 8 on K80, P100 and V100 GPUs, each job alone (the table's
'null' column; the other columns are space-shared pairs, which schedlab does not use), its GPUs
on one server (consolidated: the key `<type>`) or spread over servers (`<type>_unconsolidated`).
The table ships in data/gavel/ (SOURCE.md); `gavel_table()` reads it once.

A job of scale factor r counts every worker's steps, so each worker steps at rate / r: its step
time is T_iter = r / rate at its batch b per GPU, and Pollux's throughput r b / T_iter is b x
rate examples per second. `measured_table` lays one (job type, GPU type) out as Pollux's
measured tables (models.throughput.MeasuredTable): a consolidated scale factor r is placement
"r" (one node), an unconsolidated one r nodes of one GPU (Pollux's model only asks whether a
job spans nodes); the sync time is what the step takes above one GPU's step at the same batch
(0 on one GPU, never below 0). `fit_job_type` fits Pollux's seven parameters to those points
(models.throughput.fit_throughput_params), so every policy that values jobs with
ThroughputParams per GPU type can run Gavel's jobs; the fits ship in data/gavel/params.json
(`shipped_params`; `refit` regenerates them, and a test checks they match a fresh fit).

`steps_per_s` is what a job of Gavel's runs at: the table's rate where Gavel measured it, else
the fitted model's, r / T_iter (ours: Gavel's msr traces ask for A3C, CycleGAN and the
Recommendation models, which the table has on one GPU only, on up to 8 GPUs, where Gavel's
simulator of today stops on a missing key; their one-point fits scale linearly; K80's missing
spread ResNet-50 comes from its fit's node sync).

Examples
--------
>>> table = gavel_table()
>>> round(table.rate("ResNet-50 (batch size 64)", 4, "v100"), 2)  # steps/s on one server
9.45
>>> round(table.rate("ResNet-50 (batch size 64)", 4, "v100", consolidated=False), 2)
11.14
>>> per_gpu_batch("ResNet-50 (batch size 64)"), per_gpu_batch("A3C")
(64, 1)
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schedlab.errors import ConfigError
from schedlab.models.profiles import data_dir
from schedlab.models.throughput import MeasuredTable, fit_throughput_params, params_to_list, rmsle, step_time_s
from schedlab.state import ThroughputParams

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["GAVEL_GPU_TYPES", "UNCONSOLIDATED", "GavelTable", "JobTypeFit", "fit_job_type", "gavel_dir", "gavel_table",
           "params_path", "per_gpu_batch", "read_table", "refit", "shipped_params", "steps_per_s"]

GAVEL_GPU_TYPES = ("v100", "p100", "k80")  # Gavel's cluster specs list them in this order (V100:P100:K80)
UNCONSOLIDATED = "_unconsolidated"  # the suffix of a GPU type's key for jobs spread over servers
_ALONE = "null"  # the column of a job that shares its GPUs with no other
_BATCH = re.compile(r"\(batch size (\d+)\)")


def gavel_dir() -> Path:
    """The shipped folder of Gavel's data, schedlab/data/gavel (SOURCE.md)."""
    return data_dir() / "gavel"


def params_path() -> Path:
    """The shipped params.json: what `shipped_params` reads and `refit` regenerates."""
    return gavel_dir() / "params.json"


def per_gpu_batch(job_type: str) -> int:
    """The batch per GPU a job type trains at: its name's "(batch size b)", else 1 (A3C, CycleGAN).

    Examples
    --------
    >>> per_gpu_batch("LM (batch size 20)")
    20
    """
    found = _BATCH.search(job_type)
    return int(found.group(1)) if found else 1


@dataclass(frozen=True)
class GavelTable:
    """Gavel's throughputs of jobs alone: (GPU type, job type, scale factor, consolidated) -> steps/s."""

    rates: Mapping[tuple[str, str, int, bool], float]

    def rate(self, job_type: str, scale_factor: int, gpu_type: str, consolidated: bool = True) -> float | None:
        """Steps per second of `job_type` alone on `scale_factor` GPUs of `gpu_type`, on one
        server or spread over servers; 0 where it does not run so, None where Gavel measured none."""
        return self.rates.get((gpu_type, job_type, scale_factor, consolidated))

    @cached_property
    def job_types(self) -> tuple[str, ...]:
        """Every job type of the table, sorted."""
        return tuple(sorted({key[1] for key in self.rates}))

    @cached_property
    def gpu_types(self) -> tuple[str, ...]:
        """Every GPU type of the table, Gavel's order first (GAVEL_GPU_TYPES)."""
        found = {key[0] for key in self.rates}
        return tuple(t for t in GAVEL_GPU_TYPES if t in found) + tuple(sorted(found - set(GAVEL_GPU_TYPES)))

    def scale_factors(self, job_type: str, gpu_type: str) -> tuple[int, ...]:
        """The scale factors `job_type` runs at on `gpu_type` as measured consolidated, ascending."""
        return tuple(sorted(k[2] for k, v in self.rates.items() if k[0] == gpu_type and k[1] == job_type and k[3] and v))

    def measured_table(self, job_type: str, gpu_type: str) -> MeasuredTable:
        """The job type on `gpu_type` as Pollux's measured tables (module docstring)."""
        import pandas as pd

        batch = per_gpu_batch(job_type)
        one_gpu_s = 1.0 / self.rates[(gpu_type, job_type, 1, True)]
        rows = []
        for (t, name, r, consolidated), rate in sorted(self.rates.items()):
            if t != gpu_type or name != job_type or (r == 1 and not consolidated) or not rate:
                continue
            step_s = r / rate
            placement = str(r) if consolidated else "1" * r
            rows.append((placement, batch, step_s, max(step_s - one_gpu_s, 0.0) if r > 1 else 0.0))
        placements = pd.DataFrame(rows, columns=["placement", "local_bsz", "step_time", "sync_time"])
        scalability = pd.DataFrame(columns=["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"])
        return MeasuredTable(placements, scalability)


def _key(raw: str, where: str) -> tuple[str, int]:
    """('<job type>', <scale factor>) from the string of a Python tuple, as Gavel's
    parse_job_type_tuple reads it."""
    try:
        job_type, scale_factor = ast.literal_eval(raw)
    except (ValueError, SyntaxError, TypeError):
        raise ConfigError(f"{where}: key {raw!r} is not ('<job type>', <scale factor>)") from None
    if not isinstance(job_type, str) or not isinstance(scale_factor, int) or scale_factor < 1:
        raise ConfigError(f"{where}: key {raw!r} needs a job type name and a scale factor >= 1")
    return job_type, scale_factor


def _parse(raw: Any, where: str) -> GavelTable:
    """The table of Gavel's JSON layout (SOURCE.md), every alone-throughput checked >= 0 (0: the
    job does not run so; K80 runs ResNet-50 at batch 128 on one GPU only)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: not a GPU type -> job type -> throughputs object")
    rates: dict[tuple[str, str, int, bool], float] = {}
    for type_key, jobs in raw.items():
        consolidated = not type_key.endswith(UNCONSOLIDATED)
        gpu_type = type_key if consolidated else type_key[: -len(UNCONSOLIDATED)]
        for raw_key, row in jobs.items():
            job_type, scale_factor = _key(raw_key, f"{where}: {type_key}")
            rate = row.get(_ALONE) if isinstance(row, dict) else None
            if not isinstance(rate, int | float) or rate < 0:
                raise ConfigError(f"{where}: {type_key} {raw_key}: '{_ALONE}' must be a throughput >= 0 (steps/s)")
            rates[(gpu_type, job_type, scale_factor, consolidated)] = float(rate)
    return GavelTable(rates)


def read_table(path: str | Path) -> GavelTable:
    """A throughput table in Gavel's layout (its simulation_throughputs.json) from `path`."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"Gavel throughput table {str(path)!r} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a JSON file ({exc})") from None
    return _parse(raw, str(path))


@cache
def gavel_table() -> GavelTable:
    """The shipped table (data/gavel/simulation_throughputs.json), read once per process."""
    return read_table(gavel_dir() / "simulation_throughputs.json")


@dataclass(frozen=True)
class JobTypeFit:
    """Pollux's model of one job type on one GPU type, fitted to Gavel's table.

    Attributes
    ----------
    params
        The fitted seven parameters (seconds; models.throughput).
    fit_rmsle
        The fit's step-time RMSLE over the table's points (~ its relative error).
    """

    params: ThroughputParams
    fit_rmsle: float


def fit_job_type(table: GavelTable, job_type: str, gpu_type: str) -> JobTypeFit:
    """Fit Pollux's model to every measured point of `job_type` on `gpu_type` (module docstring)."""
    pts: pd.DataFrame = table.measured_table(job_type, gpu_type).points().astype(float)
    params = fit_throughput_params(pts.num_nodes, pts.num_replicas, pts.local_bsz, pts.step_time, pts.sync_time)
    pred = step_time_s(params, pts.num_nodes.to_numpy(), pts.num_replicas.to_numpy(), pts.local_bsz.to_numpy())
    return JobTypeFit(params, rmsle(pred, pts.step_time.to_numpy()))


def refit(table: GavelTable | None = None) -> dict[str, dict[str, dict]]:
    """Every job type's fit on every GPU type measured, as params.json holds them:
    job type -> GPU type -> {"params": [7 floats], "fit_rmsle": float}."""
    import importlib

    from threadpoolctl import threadpool_limits

    table = table or gavel_table()
    out: dict[str, dict[str, dict]] = {}
    # 78 fits of a few points each: BLAS threads only spin (6 s became 40 s on a busy machine).
    # threadpoolctl limits the libraries loaded so far, so scipy's optimizer is loaded first.
    importlib.import_module("scipy.optimize")
    with threadpool_limits(limits=1, user_api="blas"):
        for job_type in table.job_types:
            for gpu_type in table.gpu_types:
                if not table.rate(job_type, 1, gpu_type):
                    continue
                fit = fit_job_type(table, job_type, gpu_type)
                out.setdefault(job_type, {})[gpu_type] = {"params": params_to_list(fit.params),
                                                          "fit_rmsle": fit.fit_rmsle}
    return out


@cache
def shipped_params() -> dict[str, dict[str, JobTypeFit]]:
    """The shipped fits (params.json): job type -> GPU type -> JobTypeFit; read once, fits nothing."""
    shipped = json.loads(params_path().read_text())
    return {job_type: {t: JobTypeFit(ThroughputParams(*v["params"]), v["fit_rmsle"]) for t, v in by_type.items()}
            for job_type, by_type in shipped.items()}


@cache
def steps_per_s(job_type: str, scale_factor: int, gpu_type: str, consolidated: bool) -> float:
    """Steps per second of a job alone on the shipped table (module docstring): measured, else
    modelled (r / T_iter of its job type's fit at its batch, spanning nodes unless consolidated);
    0 where it does not run (measured 0, or no fit: the type never ran on one such GPU).

    Examples
    --------
    >>> round(steps_per_s("ResNet-50 (batch size 64)", 4, "v100", consolidated=True), 2)  # measured
    9.45
    >>> round(steps_per_s("A3C", 2, "v100", consolidated=True) / steps_per_s("A3C", 1, "v100", True), 2)  # modelled
    2.0
    """
    measured = gavel_table().rate(job_type, scale_factor, gpu_type, consolidated)
    if measured is not None:
        return measured
    fit = shipped_params().get(job_type, {}).get(gpu_type)
    if fit is None:
        return 0.0
    nodes = 1 if consolidated or scale_factor == 1 else scale_factor
    return float(scale_factor / step_time_s(fit.params, nodes, scale_factor, per_gpu_batch(job_type)))
