"""A/B on the same rounds: record the rounds a replay's policy solved, then solve each with every variant.

    schedlab record --workload workload-6 --policy pollux --rounds 50 --out rounds.jsonl
    schedlab compare rounds.jsonl --solver highs --solver cpsat --solver cbc [--formulation F ...]
                     [--customize module:function] [--time-limit S] [--format md|csv|latex]

A recorded round is the round the policy handed to solve_round (its settings included), one JSON
object per line in the published schema. A variant is one (solver, formulation) pair; every
variant solves every round with the round's own settings otherwise. The first variant is the
reference: `differs` counts the jobs whose GPU count, node count or total batch is not the
reference's, and `objective_vs_first` is the relative difference of the objectives.
"""

from __future__ import annotations

import importlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TextIO, runtime_checkable

import numpy as np
import pandas as pd

from schedlab.api import solve_round
from schedlab.errors import ConfigError, InputError
from schedlab.io import json_text, load_json, round_input_to_dict, spreadsheet_safe, text_table
from schedlab.policies.base import Policy
from schedlab.sim.view import sees_gpu_types
from schedlab.state import JobAllocation, RoundInput, RoundResult

__all__ = ["Recorder", "RoundModelPolicy", "Variant", "compare", "load_customize", "read_rounds", "recorder", "render",
           "summary", "variants"]


@runtime_checkable
class RoundModelPolicy(Policy, Protocol):
    """A policy that solves a round model: it says which round (round_for) it hands solve_round."""

    def round_for(self, round_input: RoundInput) -> RoundInput:
        """The round this policy's model solves."""
        ...


@dataclass
class Recorder:
    """A round-model policy that also writes each round it solves (the first `limit` with jobs)
    to `sink`: the replay's decisions are the policy's own."""

    policy: RoundModelPolicy
    sink: TextIO
    limit: int
    written: int = 0

    @property
    def name(self) -> str:
        """The recorded policy's name."""
        return self.policy.name

    @property
    def batch_mode(self) -> str:
        """The recorded policy's batch mode: the replay runs its jobs as without the recorder."""
        return self.policy.batch_mode

    @property
    def throughput_model(self) -> str:
        """The recorded policy's throughput model."""
        return self.policy.throughput_model

    @property
    def type_blind(self) -> bool:
        """Whether the recorded policy sees one model per job on every GPU type (sim.view.GPU_TYPE_VIEWS)."""
        return not sees_gpu_types(self.policy)

    def schedule(self, round_input: RoundInput) -> RoundResult:
        """Solve the round the policy would, writing it to the sink while fewer than `limit` are."""
        solved = self.policy.round_for(round_input)
        if self.written < self.limit and solved.jobs:
            self.sink.write(json_text(round_input_to_dict(solved)) + "\n")
            self.written += 1
        return solve_round(solved)


def recorder(policy: Policy, sink: TextIO, limit: int) -> Recorder:
    """`policy` recording its rounds to `sink`; only a policy that declares its round model can."""
    if not isinstance(policy, RoundModelPolicy):
        raise ConfigError(f"--policy {policy.name}: records only the round-model policies (pollux, sia, joint, icefrog, "
                          "static_freeze): the others solve no round model")
    return Recorder(policy, sink, limit)


def read_rounds(path: str | Path) -> Iterator[dict]:
    """The rounds of a JSON-lines file, each checked as JSON (the solve checks the rest)."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield load_json(line, f"{path} line {number}")


def load_customize(spec: str) -> Callable:
    """module:function, imported (a file path's folder must be on PYTHONPATH)."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ConfigError(f"--customize {spec}: give module:function, e.g. mychanges:at_most_8_gpus")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"--customize {spec}: {exc}") from None
    if not callable(fn):
        raise ConfigError(f"--customize {spec}: not a function")
    return fn


@dataclass(frozen=True)
class Variant:
    """One way to solve a recorded round: a solver (solvers.registry.SOLVERS) and a formulation."""

    solver: str
    formulation: str | None  # None: the round's own

    @property
    def label(self) -> str:
        """The variant's name in tables: solver, or solver/formulation."""
        return self.solver if self.formulation is None else f"{self.solver}/{self.formulation}"


def variants(solvers: list[str], formulations: list[str]) -> list[Variant]:
    """Every solver with every formulation, solvers outermost; no formulations: each round's own.

    Examples
    --------
    >>> [v.label for v in variants(["highs", "cpsat"], [])]
    ['highs', 'cpsat']
    >>> [v.label for v in variants(["highs", "cpsat"], ["goodput", "joint"])]
    ['highs/goodput', 'highs/joint', 'cpsat/goodput', 'cpsat/joint']
    """
    return [Variant(s, f) for s, f in itertools.product(solvers, list[str | None](formulations) or [None])]


def compare(rounds: list[dict], variant_list: list[Variant], time_limit_s: float | None = None,
            customize: Callable | None = None) -> pd.DataFrame:
    """One row per (round, variant): status, objective, bound, gap, build and solve ms, the
    objective's relative difference from the first variant's and the jobs allocated otherwise."""
    rows = []
    for number, raw in enumerate(rounds):
        first: RoundResult | None = None
        for v in variant_list:
            try:
                result = solve_round(raw, solver=v.solver, formulation=v.formulation, time_limit_s=time_limit_s,
                                     customize=customize)
            except InputError as exc:
                raise ConfigError(f"round {number} with {v.label}: {exc.problems[0]}") from None
            first = first or result
            rows.append({
                "round": number, "variant": v.label, "jobs": len(result.allocations), "status": result.status,
                "objective": result.objective, "bound": result.bound, "gap": result.gap,
                "build_ms": 1e3 * result.build_s, "solve_ms": 1e3 * result.solve_s,
                "objective_vs_first": (result.objective - first.objective) / max(abs(first.objective), 1e-9),
                "differs": _differing(first.allocations, result.allocations),
            })
    return pd.DataFrame(rows)


def _differing(a: tuple[JobAllocation, ...], b: tuple[JobAllocation, ...]) -> int:
    def shape(x: JobAllocation) -> tuple[int, int, int]:
        return len(x.gpus), len({g.node for g in x.gpus}), x.total_bsz

    return sum(shape(x) != shape(y) for x, y in zip(a, b))


def summary(per_round: pd.DataFrame) -> pd.DataFrame:
    """Per variant: rounds, optimal rounds, median and 95th-percentile build + solve ms, the
    largest gap, the mean relative objective difference from the first variant, and the rounds
    (jobs) allocated otherwise."""
    frame = per_round.assign(total_ms=per_round.build_ms + per_round.solve_ms)
    grouped = frame.groupby("variant", sort=False)
    return pd.DataFrame({
        "rounds": grouped.size(),
        "optimal": grouped.status.agg(lambda s: int((s == "optimal").sum())),
        "total_ms_p50": grouped.total_ms.median(),
        "total_ms_p95": grouped.total_ms.quantile(0.95),
        "gap_max": grouped.gap.max(),
        "objective_vs_first_mean": grouped.objective_vs_first.mean(),
        "rounds_differing": grouped.differs.agg(lambda d: int((d > 0).sum())),
        "jobs_differing": grouped.differs.sum(),
    }).reset_index()


# Decimals per column: objectives to 1e-4, times to 0.1 ms, relative quantities in 3 significant digits.
_FORMATS = {"objective": "{:.4f}", "bound": "{:.4f}", "gap": "{:.2e}", "gap_max": "{:.2e}", "build_ms": "{:.1f}",
            "solve_ms": "{:.1f}", "total_ms_p50": "{:.1f}", "total_ms_p95": "{:.1f}",
            "objective_vs_first": "{:+.2e}", "objective_vs_first_mean": "{:+.2e}"}


def render(frame: pd.DataFrame, fmt: str) -> str:
    """CSV (full precision), or a Markdown or booktabs LaTeX table with numbers right-aligned."""
    if fmt == "csv":
        return spreadsheet_safe(frame).to_csv(index=False)
    shown = frame.copy()
    for column, spec in _FORMATS.items():
        if column in shown:
            shown[column] = [spec.format(v) if np.isfinite(v) else "-" for v in shown[column]]
    return text_table(shown, fmt, [c in _FORMATS or pd.api.types.is_numeric_dtype(frame[c]) for c in frame.columns])
