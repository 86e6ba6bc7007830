"""Workloads for replay: loaders for the shipped traces and seeded generators.

A workload is a DataFrame with one row per job and the Pollux artifact's columns
    name (str), time (submit, s), application (one of the six), num_replicas, batch_size
(the user's request: GPUs and total batch). Sources:
- Pollux workloads (workloads/workload-{1..8}.csv, shipped): read as they are.
- Sia-Philly traces (PAL artifact, shipped): job_id, num_gpus, submit_time, duration, model.
  `load_sia_philly` reads them as given; `workload_from_sia_philly` maps each job to an
  application by its GPU-time, as below.
- The Philly trace (Microsoft's Philly cluster, Jeon et al., "Analysis of Large-Scale
  Multi-Tenant GPU Clusters for DNN Training Workloads", USENIX ATC'19; 82,247 jobs over 109
  days, shipped): `philly_workload` samples it exactly as Pollux's workload generator does
  (simulator/workload.py): jobs of >= 60 s and < 1000 GPU-hours, the hours [start, start +
  duration) of the day, then by GPU-time: < 1 h cifar10 or ncf, < 10 h deepspeech2 (half become
  bert), < 100 h yolov3, else imagenet; the request is drawn from the application's plausible
  (replicas, batch) configurations (ApplicationTruth).
- `sia_philly_jobs`: a Sia-Philly trace in PAL's semantics (its simulator, github.com/hal-uw/blox-pal):
  each job keeps its GPU count and a fixed work, `duration` iterations of its model's measured
  iteration time (ITERATION_S; or `duration` seconds); its variability class is the artifact's
  (MODEL_CLASS); a Pollux application stands in for its scaling and batch limits (MODEL_APP, ours:
  ResNet-50 and VGG-19 ImageNet, the transformers BERT, DCGAN and PointNet the small CIFAR-10 net).
- `synthetic_workload`: Poisson arrivals at a given rate and a given application mix.
- Gavel's traces (stanford-futuredata/gavel, scheduler/traces/, MIT; the msr ones of seed 0
  whose jobs ask for at most 8 GPUs shipped, data/gavel/SOURCE.md): `load_gavel_trace` reads
  one (its lines tab-separated, in either of Gavel's layouts, GAVEL_TRACE_LAYOUTS), checking
  every field, and the job type and scale factor against Gavel's table (models.gavel), into
  Pollux's columns plus `steps`; `gavel_jobs` makes them rigid jobs of that many steps (sim.gavel).
All randomness comes from the numpy Generator passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from schedlab.errors import ConfigError
from schedlab.models.gavel import gavel_dir, gavel_table, per_gpu_batch, steps_per_s
from schedlab.models.profiles import APPLICATIONS, data_dir
from schedlab.sim.jobs import TraceJob
from schedlab.sim.truth import application_truth

__all__ = ["DEFAULT_MIX", "GAVEL_TRACE_LAYOUTS", "ITERATION_S", "MODEL_APP", "MODEL_CLASS", "WORKLOAD_COLUMNS", "WORKS",
           "gavel_jobs", "load_gavel_trace", "load_philly", "load_sia_philly", "load_workload", "philly_trace_workload",
           "philly_workload", "shipped_gavel_traces", "shipped_sia_philly", "shipped_workloads", "sia_philly_jobs",
           "synthetic_workload", "trace_jobs", "validate_workload", "work_s", "workload_from_sia_philly"]

WORKLOAD_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
SIA_PHILLY_COLUMNS = ("job_id", "num_gpus", "submit_time", "duration", "model")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time")


def shipped_workloads() -> dict[str, Path]:
    """The Pollux artifact's 8 workloads: name (workload-1..8) -> path."""
    paths = sorted((data_dir() / "pollux" / "workloads").glob("workload-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
    return {p.stem: p for p in paths}


def shipped_sia_philly() -> dict[str, Path]:
    """The PAL artifact's 8 Sia-Philly traces: name (workload-1..8) -> path."""
    folder = data_dir() / "pal" / "workload-traces" / "philly"
    return {p.stem: p for p in sorted(folder.glob("workload-*.csv"), key=lambda p: int(p.stem.split("-")[1]))}


def _read_csv(path: str | Path, columns: tuple[str, ...], what: str) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise ConfigError(f"workload {str(path)!r} does not exist; give a CSV path"
                          f" or a shipped name ({', '.join(shipped_workloads())})") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable CSV ({exc})") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ConfigError(f"{path}: missing column(s) {', '.join(missing)}; a {what} has columns {', '.join(columns)}")
    return df


def validate_workload(df: pd.DataFrame, source: str = "workload") -> pd.DataFrame:
    """Check a workload's columns and values; return it sorted by submit time."""
    missing = [c for c in WORKLOAD_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(f"{source}: missing column(s) {', '.join(missing)}; expected {', '.join(WORKLOAD_COLUMNS)}")
    problems = []
    unknown = sorted(set(df.application) - set(APPLICATIONS))
    if unknown:
        problems.append(f"application {unknown} unknown; use {', '.join(APPLICATIONS)}")
    for col in ("time", "num_replicas", "batch_size"):
        values = pd.to_numeric(df[col], errors="coerce")
        if values.isna().any() or (values < (0 if col == "time" else 1)).any():
            rows = list(df.index[values.isna() | (values < (0 if col == "time" else 1))][:5])
            problems.append(f"column {col} needs {'non-negative' if col == 'time' else 'positive'} numbers (rows {rows})")
    if df.name.duplicated().any():
        problems.append(f"job names must be unique (duplicates: {sorted(df.name[df.name.duplicated()])[:5]})")
    for row in df.itertuples():
        if row.application in APPLICATIONS and not problems:
            truth = application_truth(row.application)
            if not truth.init_bsz <= row.batch_size <= truth.max_bsz:
                problems.append(f"job {row.name}: batch_size {row.batch_size} outside {row.application}'s measured "
                                f"[{truth.init_bsz}, {truth.max_bsz}]")
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return df.sort_values("time", kind="stable").reset_index(drop=True)


def load_workload(path_or_name: str | Path) -> pd.DataFrame:
    """A Pollux-format workload from a CSV path, or a shipped one by name ("workload-3")."""
    shipped = shipped_workloads()
    path = shipped.get(str(path_or_name), path_or_name)
    return validate_workload(_read_csv(path, WORKLOAD_COLUMNS, "workload"), str(path_or_name))


def trace_jobs(workload: pd.DataFrame) -> tuple[TraceJob, ...]:
    """A workload's rows as jobs, in its order: each trains until its completion epoch.

    Examples
    --------
    >>> trace_jobs(pd.DataFrame({"name": ["a"], "time": [30.0], "application": ["cifar10"],
    ...                          "num_replicas": [2], "batch_size": [256]}))
    (TraceJob(name='a', application='cifar10', submit_s=30.0, num_replicas=2, batch_size=256, work_s=None,
              app_class=None, steps=None),)
    """
    return tuple(TraceJob(str(r.name), str(r.application), float(r.time), int(r.num_replicas), int(r.batch_size))
                 for r in workload.itertuples())


def load_sia_philly(path_or_name: str | Path) -> pd.DataFrame:
    """A Sia-Philly trace (job_id, num_gpus, submit_time, duration, model), path or shipped name."""
    path = shipped_sia_philly().get(str(path_or_name), path_or_name)
    return _read_csv(path, SIA_PHILLY_COLUMNS, "Sia-Philly trace")


def load_philly(path: str | Path | None = None) -> pd.DataFrame:
    """The Philly trace (timestamp, duration, num_gpus, gpu_time, cluster); the shipped one by default."""
    path = path or data_dir() / "pollux" / "traces" / "philly.csv"
    df = _read_csv(path, PHILLY_COLUMNS, "Philly trace")
    df["timestamp"] = pd.to_datetime(df.timestamp)
    return df


def _application_by_gpu_time(gpu_time_s: float, rng: np.random.Generator) -> str:
    hours = gpu_time_s / 3600
    if hours < 1:
        return str(rng.choice(["cifar10", "ncf"]))
    if hours < 10:
        return "deepspeech2" if rng.random() < 0.5 else "bert"
    return "yolov3" if hours < 100 else "imagenet"


def _request(app: str, rng: np.random.Generator) -> tuple[int, int]:
    configs = application_truth(app).configurations()
    return configs[rng.integers(len(configs))]


def _workload(times: np.ndarray, apps: list[str], rng: np.random.Generator) -> pd.DataFrame:
    order = np.argsort(times, kind="stable")
    rows = []
    for idx, k in enumerate(order):
        r, bsz = _request(apps[k], rng)
        rows.append((f"{apps[k]}-{idx}", float(times[k]), apps[k], r, bsz))
    return pd.DataFrame(rows, columns=list(WORKLOAD_COLUMNS))


def philly_workload(num_jobs: int, rng: np.random.Generator, start_hour: int = 2, duration_h: int = 8,
                    philly: pd.DataFrame | None = None) -> pd.DataFrame:
    """Sample a workload from the Philly trace as Pollux's generator does (see module doc)."""
    trace = load_philly() if philly is None else philly
    trace = trace[(trace.duration >= 60) & (trace.gpu_time < 1000 * 3600)]
    stamps = trace.timestamp - pd.Timedelta(hours=start_hour)
    trace = trace[stamps.dt.hour < duration_h]
    stamps = stamps[trace.index]
    if len(trace) < num_jobs:
        raise ConfigError(f"num_jobs {num_jobs} exceeds the {len(trace)} Philly jobs in that window; lower it")
    pick = rng.choice(len(trace), size=num_jobs, replace=False)
    times = (stamps.dt.hour * 3600 + stamps.dt.minute * 60 + stamps.dt.second).to_numpy(float)[pick]
    apps = [_application_by_gpu_time(g, rng) for g in trace.gpu_time.to_numpy(float)[pick]]
    return _workload(times, apps, rng)


def philly_trace_workload(rng: np.random.Generator, start_day: float = 0.0, days: float | None = None,
                          philly: pd.DataFrame | None = None) -> pd.DataFrame:
    """The Philly trace at its real timestamps: every job submitted in [start_day, start_day +
    days) days after the trace's first submission (to its end when days is None), at its
    offset in seconds from the window's start; applications by GPU-time and requests as
    philly_workload draws them (the whole trace: 82,247 jobs over 109 days)."""
    trace = load_philly() if philly is None else philly
    if start_day < 0 or days is not None and days <= 0:
        raise ConfigError(f"start_day {start_day} must be >= 0 and days {days} > 0")
    offset_s = (trace.timestamp - trace.timestamp.min()).dt.total_seconds().to_numpy(float) - start_day * 86400.0
    keep = (offset_s >= 0) & (offset_s < (days * 86400.0 if days is not None else np.inf))
    if not keep.any():
        span = (trace.timestamp.max() - trace.timestamp.min()).total_seconds() / 86400.0
        raise ConfigError(f"no Philly job in days [{start_day}, {start_day + (days or 0)}); the trace spans {span:.0f} days")
    apps = [_application_by_gpu_time(g, rng) for g in trace.gpu_time.to_numpy(float)[keep]]
    return _workload(offset_s[keep], apps, rng)


def workload_from_sia_philly(trace: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """A Sia-Philly trace as a Pollux workload: applications by GPU-time (num_gpus x duration)."""
    gpu_time = trace.num_gpus.to_numpy(float) * trace.duration.to_numpy(float)
    apps = [_application_by_gpu_time(g, rng) for g in gpu_time]
    return _workload(trace.submit_time.to_numpy(float), apps, rng)


# The PAL artifact's model -> application class (its trace loader) and measured iteration times.
MODEL_CLASS = {"resnet50": "classA", "bert": "classB", "gpt2": "classB", "dcgan": "classB", "vgg19": "classC",
               "pointnet": "classD"}
ITERATION_S = {"resnet50": 0.17540429367763434, "bert": 0.179, "gpt2": 3.5714, "dcgan": 0.0469266931,
               "pointnet": 0.28125, "vgg19": 0.300610341}
MODEL_APP = {"resnet50": "imagenet", "vgg19": "imagenet", "bert": "bert", "gpt2": "bert", "dcgan": "cifar10",
             "pointnet": "cifar10"}
WORKS = ("iterations", "seconds")


def work_s(model: str, duration: float, work: str = "iterations") -> float:
    """Seconds of work at full speed: `duration` itself, or that many of the model's iterations.

    Examples
    --------
    >>> work_s("pointnet", 1000), work_s("pointnet", 1000, work="seconds")
    (281.25, 1000.0)
    """
    if work not in WORKS:
        raise ConfigError(f"work {work!r}: use one of {', '.join(WORKS)}")
    if work == "seconds":
        return float(duration)
    if model.lower() not in ITERATION_S:
        raise ConfigError(f"model {model!r} has no iteration time in PAL's simulator; use one of "
                          f"{', '.join(ITERATION_S)} or work='seconds'")
    return float(duration) * ITERATION_S[model.lower()]


def sia_philly_jobs(trace: pd.DataFrame, work: str = "iterations") -> tuple[TraceJob, ...]:
    """A Sia-Philly trace as jobs of fixed work (module doc), in (submit time, job id) order."""
    jobs = trace.sort_values(["submit_time", "job_id"], kind="stable")
    out = []
    for row in jobs.itertuples():
        model = str(row.model).lower()
        app = MODEL_APP.get(model, "imagenet")
        truth = application_truth(app)
        r = int(row.num_gpus)
        bsz = int(min(max(truth.init_bsz, truth.min_local_bsz * r), truth.max_bsz))
        out.append(TraceJob(str(row.job_id), app, float(row.submit_time), r, bsz, work_s(model, row.duration, work),
                            MODEL_CLASS.get(model, "classA")))
    return tuple(out)


def synthetic_workload(num_jobs: int, jobs_per_hour: float, rng: np.random.Generator,
                       mix: Mapping[str, float] | None = None) -> pd.DataFrame:
    """Poisson arrivals at `jobs_per_hour`; applications drawn with weights `mix` (default: the
    shipped workloads' mix)."""
    mix = dict(mix or DEFAULT_MIX)
    unknown = sorted(set(mix) - set(APPLICATIONS))
    if unknown or not mix or min(mix.values()) < 0 or sum(mix.values()) <= 0:
        raise ConfigError(f"mix {mix}: weights must be >= 0, sum > 0, applications from {', '.join(APPLICATIONS)}")
    if num_jobs < 1 or jobs_per_hour <= 0:
        raise ConfigError("num_jobs must be >= 1 and jobs_per_hour > 0")
    times = np.cumsum(rng.exponential(3600.0 / jobs_per_hour, size=num_jobs))
    names = sorted(mix)
    weights = np.array([mix[a] for a in names], dtype=float)
    apps = [names[k] for k in rng.choice(len(names), size=num_jobs, p=weights / weights.sum())]
    return _workload(np.round(times), apps, rng)


# Fraction of each application over the 8 shipped Pollux workloads (1,280 jobs).
DEFAULT_MIX = {"bert": 86, "cifar10": 495, "deepspeech2": 111, "imagenet": 26, "ncf": 503, "yolov3": 59}


# The fields of one line of a Gavel trace, by their count: the msr traces' layout (Gavel's
# parse_trace until 2019) and today's (its utils.parse_trace); the fields schedlab reads are
# job_type, total_steps, arrival_time and scale_factor.
GAVEL_TRACE_LAYOUTS: dict[int, tuple[str, ...]] = {
    7: ("job_type", "command", "num_steps_arg", "needs_data_dir", "total_steps", "arrival_time", "scale_factor"),
    10: ("job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps", "scale_factor",
         "priority_weight", "SLO", "arrival_time"),
}


def shipped_gavel_traces() -> dict[str, Path]:
    """Gavel's shipped msr traces of seed 0: name (the file's stem, e.g. 0e4a51) -> path."""
    return {p.stem: p for p in sorted((gavel_dir() / "traces" / "msr" / "seed=0").glob("*.trace"))}


def _gavel_number(value: str, kind: type, low: float, where: str, field: str) -> float:
    """A field's number, of `kind` and >= low, or a ConfigError naming the line and field."""
    try:
        number = kind(value)
    except ValueError:
        raise ConfigError(f"{where}: field {field} {value!r} is not a{'n integer' if kind is int else ' number'}") from None
    if not number >= low:
        raise ConfigError(f"{where}: field {field} {value!r} must be >= {low:g}")
    return number


def _gavel_row(line: str, where: str) -> tuple[str, float, int, float]:
    """(job type, arrival s, scale factor, total steps) of one trace line, every field checked."""
    values = line.rstrip("\r\n").split("\t")
    layout = GAVEL_TRACE_LAYOUTS.get(len(values))
    if layout is None:
        raise ConfigError(f"{where}: {len(values)} tab-separated fields; a Gavel trace line has "
                          f"{' or '.join(map(str, GAVEL_TRACE_LAYOUTS))} ({', '.join(GAVEL_TRACE_LAYOUTS[7])})")
    fields = dict(zip(layout, values))
    steps = _gavel_number(fields["total_steps"], int, 1, where, "total_steps")
    arrival_s = _gavel_number(fields["arrival_time"], float, 0.0, where, "arrival_time")
    scale_factor = int(_gavel_number(fields["scale_factor"], int, 1, where, "scale_factor"))
    job_type, table = fields["job_type"], gavel_table()
    if job_type not in table.job_types:
        raise ConfigError(f"{where}: field job_type {job_type!r} is not in Gavel's throughput table; use one of "
                          f"{', '.join(table.job_types)}")
    if not any(steps_per_s(job_type, scale_factor, t, True) for t in table.gpu_types):
        raise ConfigError(f"{where}: field scale_factor {scale_factor}: {job_type!r} runs on no GPU type at that many GPUs")
    return job_type, arrival_s, scale_factor, steps


def load_gavel_trace(path_or_name: str | Path) -> pd.DataFrame:
    """A Gavel trace (module docstring), path or shipped name, as a frame of Pollux's columns
    (name: the job's line number from 0, as Gavel numbers its jobs; time; application: the job
    type; num_replicas: its scale factor; batch_size: its total batch) and `steps`, sorted by
    arrival (stable). Every line is checked, against Gavel's table too (a job type it has, at a
    scale factor that runs: models.gavel.steps_per_s); an error names the line and the field."""
    path = Path(shipped_gavel_traces().get(str(path_or_name), path_or_name))
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise ConfigError(f"Gavel trace {str(path_or_name)!r} does not exist; give a path or a shipped name "
                          f"({', '.join(shipped_gavel_traces())})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text file ({exc})") from None
    rows: list[tuple[str, float, str, int, int, float]] = []
    for k, line in enumerate(lines):
        if line.strip():
            job_type, arrival_s, scale_factor, steps = _gavel_row(line, f"{path}, line {k + 1}")
            rows.append((str(len(rows)), arrival_s, job_type, scale_factor, scale_factor * per_gpu_batch(job_type), steps))
    if not rows:
        raise ConfigError(f"{path}: no jobs")
    frame = pd.DataFrame(rows, columns=[*WORKLOAD_COLUMNS, "steps"])
    return frame.sort_values("time", kind="stable").reset_index(drop=True)


def gavel_jobs(trace: pd.DataFrame) -> tuple[TraceJob, ...]:
    """A Gavel trace's rows (load_gavel_trace) as rigid jobs of its steps, in its order.

    Examples
    --------
    >>> gavel_jobs(load_gavel_trace("795a4c"))[0]
    TraceJob(name='0', application='Transformer (batch size 128)', submit_s=0.0, num_replicas=1, batch_size=128,
             work_s=None, app_class=None, steps=79561.0)
    """
    return tuple(TraceJob(str(r.name), str(r.application), float(r.time), int(r.num_replicas), int(r.batch_size),
                          steps=float(r.steps)) for r in trace.itertuples())
