"""Which trace a replay runs, as typed data: one frozen dataclass per kind, and their registry.

A TraceSpec names a trace and how to sample it; `spec.replay_jobs(config, rng)` loads it as the
replay's jobs (schedlab.traces does the reading), `spec.horizon_s(jobs, config)` is the horizon
rule of `schedlab replay` and `schedlab.replay`: the world's horizon counted from the last
submission, so a trace longer than the horizon (the Philly trace spans 109 days) drains. Sweeps
keep the world's horizon as it is, as they always have. TRACE_KINDS maps a kind (a sweep cell's
trace["kind"]) to its spec; `trace_spec(cell["trace"])` builds one.

    workload      WorkloadTrace(name)                   a Pollux-format workload: shipped name or CSV
    sia_philly    SiaPhillyTrace(name)                  a Sia-Philly trace: jobs of fixed work where the
                                                        world reads it so (ReplayConfig.sia_philly_work),
                                                        else a Pollux workload of its arrivals
    synthetic     SyntheticTrace(jobs, jobs_per_hour)   Poisson arrivals (traces.synthetic_workload)
    philly        PhillySample(jobs)                    sampled from the Philly trace as Pollux's generator
    philly_trace  PhillyTrace(start_day, days)          the Philly trace at its real timestamps
    gavel         GavelTrace(name)                      a Gavel trace: rigid jobs of its steps (sim.gavel)

FrameTrace(frame) holds a Pollux-format DataFrame; as_trace_spec turns what a user hands
schedlab.replay (a spec, a name or path, a DataFrame) into a spec.

Any spec's `replay_jobs` takes the first `max_jobs` jobs by submit time and divides their submit times by
`load` (the artifact's jobload).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from functools import singledispatch
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from schedlab.errors import ConfigError
from schedlab.sim.jobs import TraceJob
from schedlab.sim.world import ReplayConfig
from schedlab.traces import (
    gavel_jobs,
    load_gavel_trace,
    load_sia_philly,
    load_workload,
    philly_trace_workload,
    philly_workload,
    sia_philly_jobs,
    synthetic_workload,
    trace_jobs,
    validate_workload,
    workload_from_sia_philly,
)

__all__ = ["TRACE_KINDS", "FrameTrace", "GavelTrace", "PhillySample", "PhillyTrace", "SiaPhillyTrace", "SyntheticTrace",
           "TraceSpec",
           "WorkloadTrace", "as_trace_spec", "spec_fields", "trace_spec"]


def _first_jobs_at_load(df: pd.DataFrame, time_col: str, max_jobs: int | None, load: float) -> pd.DataFrame:
    """The first max_jobs jobs by submit time (all if None), submit times / load."""
    if max_jobs:
        df = df.sort_values(time_col, kind="stable").head(max_jobs)
    return df.assign(**{time_col: df[time_col] / load})


@dataclass(frozen=True)
class TraceSpec(ABC):
    """A trace to replay: its kind's parameters (the subclasses), its loader and horizon rule."""

    kind: ClassVar[str]

    @property
    @abstractmethod
    def label(self) -> str:
        """Its short name in sweep reports."""

    @property
    def title(self) -> str:
        """Its name on a progress bar."""
        return self.label

    @abstractmethod
    def workload(self, rng: np.random.Generator) -> pd.DataFrame:
        """The trace as a Pollux-format workload (traces module docstring), drawn with `rng`."""

    def replay_jobs(self, config: ReplayConfig, rng: np.random.Generator, max_jobs: int | None = None,
             load: float = 1.0) -> tuple[TraceJob, ...]:
        """The trace as the jobs a replay in `config`'s world runs (module docstring)."""
        return trace_jobs(_first_jobs_at_load(self.workload(rng), "time", max_jobs, load))

    def horizon_s(self, jobs: tuple[TraceJob, ...], config: ReplayConfig) -> float:
        """The world's horizon as a drain time after the last submission."""
        return max(config.horizon_s, max(j.submit_s for j in jobs) + config.horizon_s)


def _check_jobs(jobs: Any) -> None:
    if not isinstance(jobs, int) or jobs < 1:
        raise ConfigError("jobs must be an integer >= 1")


def _short(name: str) -> str:
    return Path(name).stem if name.endswith(".csv") else name


@dataclass(frozen=True)
class _NamedTrace(TraceSpec, ABC):
    """A trace read by name: a shipped one (workload-1..8) or a CSV path."""

    name: str

    @property
    def title(self) -> str:
        """The name as given."""
        return self.name


@dataclass(frozen=True)
class WorkloadTrace(_NamedTrace):
    """A Pollux-format workload: a shipped name (workload-1..8) or a CSV path."""

    kind: ClassVar[str] = "workload"

    @property
    def label(self) -> str:
        """The shipped name, or the CSV's file name without .csv."""
        return _short(self.name)

    def workload(self, rng: np.random.Generator) -> pd.DataFrame:
        """The workload as read (traces.load_workload)."""
        return load_workload(self.name)


@dataclass(frozen=True)
class SiaPhillyTrace(_NamedTrace):
    """A Sia-Philly trace (PAL's artifact): a shipped name (workload-1..8) or a CSV path."""

    kind: ClassVar[str] = "sia_philly"

    @property
    def label(self) -> str:
        """sia-philly/ and its short name."""
        return f"sia-philly/{_short(self.name)}"

    def workload(self, rng: np.random.Generator) -> pd.DataFrame:
        """Its arrivals as a Pollux workload, applications drawn by GPU-time."""
        return workload_from_sia_philly(load_sia_philly(self.name), rng)

    def replay_jobs(self, config: ReplayConfig, rng: np.random.Generator, max_jobs: int | None = None,
             load: float = 1.0) -> tuple[TraceJob, ...]:
        """Jobs of fixed work where the world reads Sia-Philly traces so, else the workload's."""
        if config.sia_philly_work is None:
            return super().replay_jobs(config, rng, max_jobs, load)
        raw = _first_jobs_at_load(load_sia_philly(self.name), "submit_time", max_jobs, load)
        return sia_philly_jobs(raw, config.sia_philly_work)


@dataclass(frozen=True)
class GavelTrace(_NamedTrace):
    """A Gavel trace: a shipped name (an msr trace of seed 0, e.g. 0e4a51) or a path."""

    kind: ClassVar[str] = "gavel"

    @property
    def label(self) -> str:
        """gavel/ and the trace file's name without .trace."""
        return f"gavel/{Path(self.name).stem}"

    def workload(self, rng: np.random.Generator) -> pd.DataFrame:
        """Its jobs in Pollux's columns and their steps (traces.load_gavel_trace)."""
        return load_gavel_trace(self.name)

    def replay_jobs(self, config: ReplayConfig, rng: np.random.Generator, max_jobs: int | None = None,
                    load: float = 1.0) -> tuple[TraceJob, ...]:
        """Rigid jobs of their steps (traces.gavel_jobs)."""
        return gavel_jobs(_first_jobs_at_load(self.workload(rng), "time", max_jobs, load))


@dataclass(frozen=True)
class SyntheticTrace(TraceSpec):
    """`jobs` Poisson arrivals at `jobs_per_hour`, applications drawn with weights `mix`
    (default: the shipped workloads' mix)."""

    jobs: int
    jobs_per_hour: float
    mix: Mapping[str, float] | None = field(default=None, hash=False)
    kind: ClassVar[str] = "synthetic"

    def __post_init__(self):
        _check_jobs(self.jobs)
        if not (isinstance(self.jobs_per_hour, int | float) and self.jobs_per_hour > 0):
            raise ConfigError("jobs_per_hour must be a number > 0")

    @property
    def label(self) -> str:
        """synthetic-<jobs>j-<rate>ph."""
        return f"synthetic-{self.jobs}j-{self.jobs_per_hour:g}ph"

    def workload(self, rng: np.random.Generator) -> pd.DataFrame:
        """traces.synthetic_workload."""
        return synthetic_workload(self.jobs, self.jobs_per_hour, rng, self.mix)


@dataclass(frozen=True)
class PhillySample(TraceSpec):
    """`jobs` jobs sampled from the Philly trace as Pollux's generator does, from the hours
    [start_hour, start_hour + duration_h) of the day (traces.philly_workload)."""

    jobs: int
    start_hour: int = 2
    duration_h: int = 8
    kind: ClassVar[str] = "philly"

    def __post_init__(self):
        _check_jobs(self.jobs)

    @property
    def label(self) -> str:
        """philly-<jobs>j."""
        return f"philly-{self.jobs}j"

    def workload(self, rng: np.random.Generator) -> pd.DataFrame:
        """traces.philly_workload."""
        return philly_workload(self.jobs, rng, self.start_hour, self.duration_h)


@dataclass(frozen=True)
class PhillyTrace(TraceSpec):
    """The Philly trace at its real timestamps: the jobs submitted in [start_day, start_day +
    days) days after its first submission (to its end when days is None)."""

    start_day: float = 0.0
    days: float | None = None
    kind: ClassVar[str] = "philly_trace"

    @property
    def label(self) -> str:
        """philly (day <start_day>, <days or all> days)."""
        return f"philly (day {self.start_day:g}, {self.days or 'all'} days)"

    def workload(self, rng: np.random.Generator) -> pd.DataFrame:
        """traces.philly_trace_workload."""
        return philly_trace_workload(rng, self.start_day, self.days)


@dataclass(frozen=True, eq=False)
class FrameTrace(TraceSpec):
    """A Pollux-format workload given as a DataFrame (checked as a CSV would be)."""

    frame: pd.DataFrame
    kind: ClassVar[str] = "frame"

    @property
    def label(self) -> str:
        """workload (N jobs)."""
        return f"workload ({len(self.frame)} jobs)"

    def workload(self, rng: np.random.Generator) -> pd.DataFrame:
        """The frame, checked and sorted by submit time (traces.validate_workload)."""
        return validate_workload(self.frame)


TRACE_KINDS: dict[str, type[TraceSpec]] = {
    cls.kind: cls for cls in (WorkloadTrace, SiaPhillyTrace, SyntheticTrace, PhillySample, PhillyTrace, GavelTrace)
}


def spec_fields(kind: str) -> set[str]:
    """The parameters of a trace kind (a sweep's table of that kind takes these keys)."""
    return {f.name for f in fields(TRACE_KINDS[kind])}


def trace_spec(raw: Mapping[str, Any]) -> TraceSpec:
    """The spec of a trace given as data, {"kind": ..., parameters}: a sweep cell's trace."""
    params = dict(raw)
    kind = params.pop("kind", None)
    if kind not in TRACE_KINDS:
        raise ConfigError(f"trace kind {kind!r}: use one of {', '.join(TRACE_KINDS)}")
    required = {f.name for f in fields(TRACE_KINDS[kind]) if f.default is MISSING and f.default_factory is MISSING}
    missing, unknown = sorted(required - set(params)), sorted(set(params) - spec_fields(kind))
    if missing or unknown:
        problem = f"missing {missing[0]}" if missing else f"unknown key {unknown[0]!r}"
        raise ConfigError(f"{problem}; a {kind} trace takes {', '.join(sorted(spec_fields(kind)))} "
                          f"({', '.join(sorted(required))} required)")
    return TRACE_KINDS[kind](**params)


@singledispatch
def as_trace_spec(trace: Any) -> TraceSpec:
    """A TraceSpec from what a user hands schedlab.replay: a spec, a shipped workload's name or a
    CSV path, or a Pollux-format DataFrame."""
    raise ConfigError(f"trace {trace!r}: give a TraceSpec (schedlab.trace_specs), a workload name or CSV path, "
                      "or a DataFrame with the columns name, time, application, num_replicas, batch_size")


@as_trace_spec.register
def _(trace: TraceSpec) -> TraceSpec:
    return trace


@as_trace_spec.register(str)
@as_trace_spec.register(Path)
def _(trace: str | Path) -> TraceSpec:
    return WorkloadTrace(str(trace))


@as_trace_spec.register
def _(trace: pd.DataFrame) -> TraceSpec:
    return FrameTrace(trace)
