"""A sweep's TOML config, validated, and its expansion into cells (one replay each).

    [sweep]
    name = "pollux-artifact"        # default output folder: results/<name>, so a plain folder name
    world = "pollux"                # the world's defaults (sim.world.WORLDS): pollux, pal, variability, gavel
    baseline = "tiresias"           # policy label the report compares against
    metric = "mean_jct_s"           # the report's headline metric

    [traces]                        # at least one kind; every entry is one trace
    workloads = ["workload-1"]      # shipped Pollux workloads or CSV paths
    sia_philly = ["workload-1"]     # shipped Sia-Philly traces or paths (apps drawn per seed)
    gavel = ["0e4a51"]              # Gavel's shipped msr traces or .trace paths (world = "gavel")
    synthetic = [{jobs = 160, jobs_per_hour = 20.0}]   # Poisson arrivals, optional mix = {...}
    philly = [{jobs = 160}]         # sampled from the Philly trace as Pollux's generator
    max_jobs = 40                   # optional: the first N jobs of each trace

    [grid]                          # every list is an axis; a scalar is a one-value axis
    policies = ["pollux", {name = "ones", label = "ones-g20", config = {generations = 20}}]
    seeds = [0, 1, 2]               # sampled traces and seeded policies
    load = [1.0, 1.5]               # submit times divided by load (the artifact's jobload)
    nodes = [16]
    gpus_per_node = [4]
    cluster = ["t4:6x4,v100:5x4,k80:5x4"]   # or node pools of GPU types instead of nodes x gpus_per_node:
                                    #   TYPE:NODESxGPUS strings, Gavel's "36:36:36", or lists of
                                    #   {gpu_type, num_nodes, gpus_per_node} tables (clusters.as_pools)
    round_s = [60.0]
    model = ["policy"]              # "policy" (its own choice), "online" or "oracle"
    opt_in = [0.0, 1.0]             # fraction of jobs opting in to layer freezing (seeded)
    penalty_scale = [1.0]           # x the default frozen-penalty scale (models.freezing)
    budget = [0.03]                 # each opted-in job's accuracy-penalty budget
    across_node = [1.7]             # the world's cluster and semantics (WORLD_AXES), default the
    racks = [4]                     #   world's own: PAL's flat penalty, racks, their uplinks,
    uplink_gbps = [50.0]            #   GPU variability (none, measured, centroids) and how
    variability = ["measured"]      #   Sia-Philly durations count as work (iterations, seconds)
    work = ["iterations"]
    order = ["fifo"]                # set on the policies that have the field (POLICY_AXES):
    backfill = [false]              #   the placement policies' queue

Every policy runs on every world: the world only supplies defaults. A cell is a plain
JSON-able dict; its key hashes the cell and the package's source (every module and shipped data
file), so a changed config or changed code (an edited formulation in an editable install too)
never reuses a stale result.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import tomli_w

from schedlab.clusters import VARIABILITY, NodePool, as_pools, parse_pools, pools_text
from schedlab.errors import ConfigError
from schedlab.policies import make_policy
from schedlab.policies.placement import QUEUE_ORDERS
from schedlab.sim.view import THROUGHPUT_MODELS
from schedlab.sim.world import WORLDS
from schedlab.trace_specs import spec_fields, trace_spec
from schedlab.traces import WORKS

__all__ = ["CLUSTER_AXIS", "MODELS", "POLICY_AXES", "WORLD_AXES", "Sweep", "cell_gpus", "cell_key", "cell_pools",
           "load_sweep", "parse_sweep", "source_hash", "trace_label"]

# grid axis -> the ReplayConfig option it sets (ReplayConfig.with_options); its default is the world's own value
WORLD_AXES = {"nodes": "num_nodes", "gpus_per_node": "gpus_per_node", "round_s": "round_s",
              "across_node": "across_node_factor", "racks": "racks", "uplink_gbps": "uplink_gbps",
              "variability": "variability", "work": "sia_philly_work"}
RUN_DEFAULTS = {"seeds": [0], "load": [1.0], "model": ["policy"], "opt_in": [0.0], "penalty_scale": [1.0],
                "budget": [0.03]}
POLICY_AXES = ("order", "backfill")  # set on the policies that have the field, in cells only when given
# grid.cluster: node pools (clusters.pools_text) in cells only when given, in place of these axes
CLUSTER_AXIS, SHAPE_AXES = "cluster", ("nodes", "gpus_per_node")
SECTIONS = {
    "sweep": {"name", "baseline", "metric", "world"},
    "traces": {"workloads", "sia_philly", "gavel", "synthetic", "philly", "max_jobs"},
    "grid": {"policies", *RUN_DEFAULTS, *WORLD_AXES, *POLICY_AXES, CLUSTER_AXIS},
}
MODELS = {"policy": None} | {name: name for name in THROUGHPUT_MODELS}  # grid.model -> ReplayConfig.throughput_model
# [traces] key -> the trace kind (trace_specs.TRACE_KINDS) of each entry: a name or path, or a table of the kind's fields
NAMED_TRACES = {"workloads": "workload", "sia_philly": "sia_philly", "gavel": "gavel"}
SAMPLED_TRACES = {"synthetic": "synthetic", "philly": "philly"}


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: its cells, in the config's order, and how its report reads them.

    Attributes
    ----------
    name
        The default output folder's name (results/<name>).
    baseline
        The policy label the report compares against (None: no comparison).
    metric
        The report's headline metric: a key of a replay's summary (sim.metrics.summarize), or cpu_s.
    cells
        One JSON-able dict per replay: trace, max_jobs, policy, world, seed and every axis.
    text
        The config as given (with any overrides), stored beside the results.
    source
        Where the config was read from (its path), to name it in errors.
    """

    name: str
    baseline: str | None
    metric: str
    cells: tuple[dict[str, Any], ...]
    text: str  # the config as given, stored beside the results
    source: str = "sweep config"

    def same_results(self, other: Sweep) -> bool:
        """Whether `other` resolves to this sweep's cells, in order, baseline and metric: the same
        results and the same table, however its text is written or named."""
        return (self.cells, self.baseline, self.metric) == (other.cells, other.baseline, other.metric)


# A sweep's name is its folder under the results root (results/<name>): plain, so that it stays there.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]+")
NAME_RULES: tuple[tuple[Callable[[str], bool], str], ...] = (
    (lambda name: not name, "is empty"),
    (lambda name: name.startswith(("/", "\\")), "is an absolute path"),
    (lambda name: "/" in name or "\\" in name, "holds a path separator"),
    (lambda name: not name.strip("."), "is only dots"),
    (lambda name: not PLAIN_NAME.fullmatch(name), "holds characters other than ASCII letters, digits, -, _ and ."),
)


def name_problem(name: str) -> str | None:
    """What keeps `name` from being a folder of its own under the results root, or None."""
    return next((problem for broken, problem in NAME_RULES if broken(name)), None)


def cell_key(cell: dict[str, Any]) -> str:
    """The name a cell's result is stored under: 20 hex digits.

    A SHA-256 of the cell and of the package's source (source_hash): a changed cell or changed
    code never reuses a stored result.
    """
    blob = json.dumps({"cell": cell, "source": source_hash()}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


# What cannot change a cell's result: the interfaces and the presentation (a reworded report keeps
# the cells); everything else under schedlab/, code and data, is in the hash.
NOT_IN_SOURCE_HASH = ("cli/", "replay_api.py", "serve.py", "workbench.py", "bench/", "sweep/report.py")


@cache
def source_hash() -> str:
    """A hash of the package as installed: every file under schedlab/ (~6 MB, ~20 ms) but
    compiled caches and NOT_IN_SOURCE_HASH, so that a change to the code or data a replay runs
    gives every cell a new key."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        name = path.relative_to(root).as_posix()
        if not name.startswith(NOT_IN_SOURCE_HASH):
            digest.update(name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:20]


def trace_label(trace: dict[str, Any]) -> str:
    """A cell's trace as reports name it (trace_specs.TraceSpec.label)."""
    return trace_spec(trace).label


def load_sweep(path: str | Path, overrides: dict[str, dict[str, Any]] | None = None) -> Sweep:
    """The sweep in the TOML file at `path` (parse_sweep); ConfigError if it cannot be read."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read sweep config {path}: {exc.strerror}") from exc
    return parse_sweep(text, str(path), overrides)


def parse_sweep(text: str, source: str = "sweep config",
                overrides: dict[str, dict[str, Any]] | None = None) -> Sweep:
    """The sweep in `text`; `overrides` (section -> key -> value) replace the file's values,
    as an experiment script's command-line options do."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
    for section, values in (overrides or {}).items():
        raw.setdefault(section, {}).update(values)
    if overrides and any(overrides.values()):  # stored beside the results: the config that ran
        text = f"# {source}, with {overrides}\n" + tomli_w.dumps(raw)
    where = _Where(text, source)
    for section in raw:
        if section not in SECTIONS:
            raise where.error(section, f"unknown section [{section}]; use {', '.join(f'[{s}]' for s in SECTIONS)}")
        if not isinstance(raw[section], dict):
            raise where.error(section, f"{section} must be a table [{section}]")
        for key in raw[section]:
            if key not in SECTIONS[section]:
                raise where.error(key, f"unknown key {section}.{key}; use one of {', '.join(sorted(SECTIONS[section]))}")
    head, traces_raw, grid = raw.get("sweep", {}), raw.get("traces", {}), raw.get("grid", {})
    world = head.get("world", "pollux")
    if world not in WORLDS:
        raise where.error("world", f"sweep.world {world!r}: use one of {', '.join(WORLDS)}")
    options = WORLDS[world].options()
    defaults = RUN_DEFAULTS | {axis: [options[field]] for axis, field in WORLD_AXES.items()}
    defaults |= {axis: grid[axis] for axis in POLICY_AXES if axis in grid}
    clusters = _clusters(grid, world, where) if CLUSTER_AXIS in grid else []
    if clusters:
        defaults = {k: v for k, v in defaults.items() if k not in SHAPE_AXES} | {CLUSTER_AXIS: clusters}
    traces = _traces(traces_raw, where)
    policies = _policies(grid.get("policies"), where)
    axes = {k: _axis(grid.get(k, v), k, where) for k, v in defaults.items()}
    if clusters:
        axes[CLUSTER_AXIS] = clusters  # as pools_text writes them
    _check_axes({k: axes.get(k, [1]) for k in (*defaults, *SHAPE_AXES)}, where)
    max_jobs = traces_raw.get("max_jobs")
    if max_jobs is not None and (not isinstance(max_jobs, int) or max_jobs < 1):
        raise where.error("max_jobs", "traces.max_jobs must be an integer >= 1")
    labels = [p["label"] for p in policies]
    baseline = head.get("baseline")
    if baseline is not None and baseline not in labels:
        raise where.error("baseline", f"sweep.baseline {baseline!r} is not among the policies {labels}")
    cells = []
    names = list(defaults)
    floats = ("load", "round_s", "opt_in", "penalty_scale", "budget", "across_node", "uplink_gbps")
    for trace, policy, *values in itertools.product(traces, policies, *(axes[k] for k in names)):
        cell = {"trace": trace, "max_jobs": max_jobs, "policy": policy, "world": world, **dict(zip(names, values))}
        cell["seed"] = cell.pop("seeds")
        cells.append(cell | {k: float(cell[k]) for k in floats})
    return Sweep(_name(head, source, where), baseline, str(head.get("metric", "mean_jct_s")), tuple(cells), text, source)


def _clusters(grid: dict[str, Any], world: str, where: _Where) -> list[str]:
    """grid.cluster's node pools, each as clusters.pools_text writes it, checked against the world."""
    given = [k for k in SHAPE_AXES if k in grid]
    if given:
        raise where.error(given[0], f"grid.{given[0]} and grid.cluster both shape the cluster: give one (the pools "
                                    "hold the nodes)")
    raw = grid[CLUSTER_AXIS]
    entries = raw if isinstance(raw, list) and raw and not isinstance(raw[0], dict) else [raw]
    out = []
    for entry in entries:
        try:
            pools = as_pools(entry, "grid.cluster")
            WORLDS[world].with_options(pools=pools)
        except ConfigError as exc:
            raise where.error(CLUSTER_AXIS, str(exc)) from None
        out.append(pools_text(pools))
    return out


def cell_pools(cell: dict[str, Any]) -> tuple[NodePool, ...]:
    """A cell's node pools (grid.cluster), () for a cell of one pool (nodes x gpus_per_node)."""
    return parse_pools(cell[CLUSTER_AXIS]) if CLUSTER_AXIS in cell else ()


def cell_gpus(cell: dict[str, Any]) -> int:
    """A cell's GPUs: its pools', or nodes x gpus_per_node."""
    pools = cell_pools(cell)
    return sum(p.num_nodes * p.gpus_per_node for p in pools) if pools else cell["nodes"] * cell["gpus_per_node"]


def _name(head: dict[str, Any], source: str, where: _Where) -> str:
    """sweep.name, plain (name_problem); without one, the config file's stem, which holds no
    separator and is no dots-only name of a file that could be read."""
    if "name" not in head:
        return Path(source).stem
    name = str(head["name"])
    if problem := name_problem(name):
        raise where.error("name", f"sweep.name {name!r} {problem}; name the sweep with ASCII letters, digits, -, _ "
                                  "and . (not only dots), e.g. \"load-study\": its results go to results/<name>")
    return name


class _Where:
    """Finds the line a key is on, for error messages (tomllib gives positions only for syntax)."""

    def __init__(self, text: str, source: str):
        self.lines = text.splitlines()
        self.source = source

    def line_of(self, key: str) -> int | None:
        pattern = re.compile(rf'(^\s*\[*\s*([\w.-]+\.)?"?{re.escape(key)}"?\s*[=\]])|([{{,]\s*"?{re.escape(key)}"?\s*=)')
        for number, line in enumerate(self.lines, 1):
            if pattern.search(line.split("#", 1)[0]):
                return number
        return None

    def line_of_value(self, value: str) -> int | None:
        for number, line in enumerate(self.lines, 1):
            if f'"{value}"' in line.split("#", 1)[0]:
                return number
        return None

    def error(self, key: str, message: str, value: str | None = None) -> ConfigError:
        line = (self.line_of_value(value) if value is not None else None) or self.line_of(key)
        return ConfigError(f"{self.source}{f', line {line}' if line else ''}: {message}")


def _traces(raw: dict[str, Any], where: _Where) -> list[dict[str, Any]]:
    traces: list[dict[str, Any]] = []
    for key, kind in NAMED_TRACES.items():
        names = raw.get(key, [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise where.error(key, f"traces.{key} must be a list of names or paths")
        traces += [{"kind": kind, "name": n} for n in names]
    for key, kind in SAMPLED_TRACES.items():
        allowed = spec_fields(kind)
        specs = raw.get(key, [])
        if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
            raise where.error(key, f"traces.{key} must be a list of tables, e.g. [{{jobs = 160}}]")
        for spec in specs:
            unknown = sorted(set(spec) - allowed)
            if unknown:
                raise where.error(unknown[0], f"traces.{key}: unknown key {unknown[0]!r}; use {', '.join(sorted(allowed))}")
            try:
                trace_spec({"kind": kind, **spec})
            except ConfigError as exc:
                raise where.error(key, f"traces.{key}: {exc}") from None
            traces.append({"kind": kind, **spec})
    if not traces:
        raise where.error("traces", "no traces: set traces.workloads, sia_philly, gavel, synthetic or philly")
    return traces


def _policies(raw: Any, where: _Where) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise where.error("policies", "grid.policies must be a non-empty list of names or {name = ..., ...} tables")
    out = []
    for entry in raw:
        spec = {"name": entry} if isinstance(entry, str) else dict(entry) if isinstance(entry, dict) else {}
        name = spec.get("name")
        if not isinstance(name, str):
            raise where.error("policies", f"grid.policies: {entry!r} is not a policy name or a {{name = ...}} table")
        try:
            make_policy(name)
        except ConfigError as exc:
            raise where.error("policies", f"grid.policies: {exc}", value=name) from None
        spec.pop("name")
        label = str(spec.pop("label", name))
        out.append({"name": name, "label": label, "params": spec})
    labels = [p["label"] for p in out]
    if len(set(labels)) != len(labels):
        raise where.error("policies", f"grid.policies: labels must differ (got {labels}); add label = \"...\"")
    return out


def _axis(value: Any, key: str, where: _Where) -> list[Any]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise where.error(key, f"grid.{key} must not be empty")
    return values


def _check_axes(axes: dict[str, list[Any]], where: _Where) -> None:
    number = lambda v: isinstance(v, int | float) and not isinstance(v, bool)  # noqa: E731
    for key in ("seeds", "nodes", "gpus_per_node", "racks"):
        low = 1 if key in ("nodes", "gpus_per_node") else 0
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= low for v in axes[key]):
            raise where.error(key, f"grid.{key} must hold integers >= {low}")
    for key in ("load", "round_s", "penalty_scale", "uplink_gbps"):
        if not all(number(v) and v > 0 for v in axes[key]):
            raise where.error(key, f"grid.{key} must hold numbers > 0")
    if not all(number(v) and v >= 1 for v in axes["across_node"]):
        raise where.error("across_node", "grid.across_node must hold numbers >= 1")
    for key, hi in (("opt_in", 1.0), ("budget", 1.0)):
        if not all(number(v) and 0 <= v <= hi for v in axes[key]):
            raise where.error(key, f"grid.{key} must hold numbers in [0, {hi:g}]")
    for key, allowed in (("model", MODELS), ("variability", tuple(VARIABILITY)), ("work", (None, *WORKS)),
                         ("order", tuple(QUEUE_ORDERS))):
        if not all(v in allowed for v in axes.get(key, [])):
            raise where.error(key, f"grid.{key} must be among {[a for a in allowed if a is not None]}")
    if not all(isinstance(v, bool) for v in axes.get("backfill", [])):
        raise where.error("backfill", "grid.backfill must hold true or false")
