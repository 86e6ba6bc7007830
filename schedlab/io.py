"""JSON <-> dataclasses for rounds, with validation that names every bad field and its fix.

The format is published as JSON Schema in schedlab/schemas/. Parsing collects every problem
before raising one InputError, so a caller fixes its input in one pass.
"""

from __future__ import annotations

import difflib
import json
import math
import re
import reprlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard

from schedlab.errors import InputError, SchedlabError
from schedlab.models.freezing import PROFILES as LAYER_PROFILES
from schedlab.models.freezing import layer_profile
from schedlab.models.profiles import shipped_profiles
from schedlab.state import (
    BatchLimits,
    Cluster,
    FreezePenalty,
    FreezeSpec,
    GpuRef,
    GradStats,
    JobAllocation,
    JobSpec,
    LayerGroup,
    Node,
    Rack,
    RoundInput,
    RoundResult,
    Settings,
    Status,
    ThroughputParams,
    Topology,
)

if TYPE_CHECKING:
    import pandas as pd

PARAM_NAMES = tuple(ThroughputParams.__dataclass_fields__)
PENALTY_NAMES = tuple(FreezePenalty.__dataclass_fields__)
BATCH_NAMES = tuple(BatchLimits.__dataclass_fields__)
_MAX_MIN = ("-inf", "max-min")


_SCHEMA = json.loads((Path(__file__).parent / "schemas" / "round_input.schema.json").read_text())


def _schema_objects(schema: Mapping) -> dict[str, Mapping]:
    """Each kind of object of a round, its node in the published schema."""
    props, defs = schema["properties"], schema["$defs"]
    cluster, job, freezing = props["cluster"]["properties"], props["jobs"]["items"], defs["freezing"]
    return {
        "round": schema, "cluster": props["cluster"], "node": cluster["nodes"]["items"],
        "topology": cluster["topology"], "rack": cluster["topology"]["properties"]["racks"]["items"],
        "job": job, "grad_stats": job["properties"]["grad_stats"], "batch": job["properties"]["batch"],
        "settings": props["settings"], "freezing": freezing, "group": freezing["properties"]["groups"]["items"],
        "penalty": freezing["properties"]["penalty"], "gpu": defs["gpu"], "params": defs["params"],
    }


_OBJECTS = _schema_objects(_SCHEMA)
# Each object's keys and each number's range are read from the published schema: whatever it
# does not list, or lists out of range, the parser rejects, so the two cannot drift.
SCHEMA_KEYS = {kind: frozenset(node["properties"]) for kind, node in _OBJECTS.items()}
# The size of a round, from the schema too (maxItems, maximum, maxLength), and its GPUs in all:
# the largest round measured (README, Benchmark: 65,536 GPUs, 32,768 jobs) is the limit, so that a
# round's time limit holds (within ~2x) whatever its size.
MAX_NODES = _SCHEMA["properties"]["cluster"]["properties"]["nodes"]["maxItems"]
MAX_GPUS_PER_NODE = _SCHEMA["properties"]["cluster"]["properties"]["nodes"]["items"]["properties"]["gpus"]["maximum"]
MAX_JOBS = _SCHEMA["properties"]["jobs"]["maxItems"]
MAX_ID_CHARS = _SCHEMA["properties"]["jobs"]["items"]["properties"]["id"]["maxLength"]
MAX_GPUS = 65_536
MAX_SLOWDOWN = _OBJECTS["node"]["properties"]["slowdown"]["additionalProperties"]["items"]["maximum"]
_shown = reprlib.Repr()
_shown.maxstring, _shown.maxother, _shown.maxlevel = 60, 60, 3


def _is_id(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS


def _show(value: Any) -> str:
    """A bad value as an error message quotes it: shortened (a 50 MB string is not echoed back)
    and depth-limited (a deeply nested value cannot recurse)."""
    return _shown.repr(value)


def _types(spec: Mapping) -> set[str]:
    return set(spec.get("type", []) if isinstance(spec.get("type"), list) else [spec.get("type")])


def _rules(spec: Mapping) -> dict[str, Any]:
    types = _types(spec)
    return {"minimum": spec.get("minimum"), "positive": "exclusiveMinimum" in spec, "integer": "integer" in types,
            "maximum": spec.get("maximum")}


# Per object kind, per numeric key: the schema's type and range as _Checker.number takes them.
_FIELD_RULES = {kind: {key: _rules(spec) for key, spec in node["properties"].items()
                       if {"number", "integer"} & _types(spec)}
                for kind, node in _OBJECTS.items()}


class _Accept(NamedTuple):
    """A rule as the ranges a plain int or float within it falls in: the common, valid case is
    two comparisons (a round of 8,000 jobs reads ~200,000 numbers); anything else, NaN and
    infinities included (they fail the comparisons), goes to _number_problem for its message."""

    float_lo: float  # floats in [float_lo, float_hi] are valid; integer fields take none here
    float_hi: float
    int_lo: int
    int_hi: int
    positive: bool
    integer: bool


def _accept(minimum: float | None, positive: bool, integer: bool, maximum: float | None) -> _Accept:
    lo = -math.inf if minimum is None else minimum
    hi = sys.float_info.max if maximum is None else maximum
    return _Accept(math.inf if integer else lo, -math.inf if integer else hi,
                   math.ceil(max(lo, -(2**53))), math.floor(min(hi, 2**53)), positive, integer)


_FIELD_ACCEPT = {kind: {key: _accept(**rules) for key, rules in keys.items()} for kind, keys in _FIELD_RULES.items()}


def _number_problem(v: Any, minimum: float | None, positive: bool, integer: bool, maximum: float | None) -> str | None:
    """What is wrong with v as a number of these bounds, or None."""
    kind = type(v)
    if kind is bool or not isinstance(v, (int, float)):
        return f"must be {'an integer' if integer else 'a number'}, got {_show(v)}"
    if kind is not int and not math.isfinite(v):
        return f"must be a finite number, got {v!r}"
    if (kind is int or integer) and abs(v) > 2**53:  # a float too: 1e300 is "whole"
        digits = f"{len(str(abs(v)))}" if abs(v) < 10**4000 else "over 4,000"  # str() stops at 4,300 digits
        return f"must be at most 2**53 in size, got {f'an integer of {digits} digits' if kind is int else _show(v)}"
    if integer and v != int(v):
        return f"must be a whole number, got {_show(v)}"
    if positive and v <= 0:
        return f"must be > 0, got {_show(v)}"
    if minimum is not None and v < minimum:
        return f"must be >= {minimum}, got {_show(v)}"
    if maximum is not None and v > maximum:
        return f"must be <= {maximum:g}, got {_show(v)}"
    return None


class _Checker:
    """Collects problems; each getter returns a usable default so parsing can go on."""

    def __init__(self):
        self.problems: list[str] = []
        self.layer_groups: dict[tuple, tuple[LayerGroup, ...]] = {}  # valid groups by their raw values

    def bad(self, where: str, what: str) -> None:
        self.problems.append(f"{where}: {what}")

    def number(self, d: Mapping, key: str, where: str, default=None, minimum: float | None = None,
               positive: bool = False, integer: bool = False, required: bool = False, maximum: float | None = None):
        v = d.get(key)
        if v is None:
            if required:
                self.bad(f"{where}.{key}", "is required")
            return default
        problem = _number_problem(v, minimum, positive, integer, maximum)
        if problem is None:
            return int(v) if integer else float(v)
        self.bad(key if where == "round" else f"{where}{key}" if key.startswith("[") else f"{where}.{key}", problem)
        return default

    def field(self, d: Mapping, kind: str, key: str, where: str, default=None, required: bool = False):
        """A number of an object of `kind`, checked against its schema's type and range."""
        v = d.get(key)
        accept = _FIELD_ACCEPT[kind][key]
        if type(v) is float:
            if accept.float_lo <= v <= accept.float_hi and (v > 0 or not accept.positive):
                return v
        elif type(v) is int and accept.int_lo <= v <= accept.int_hi and (v > 0 or not accept.positive):
            return v if accept.integer else float(v)
        elif v is None and not required:
            return default
        return self.number(d, key, where, default, required=required, **_FIELD_RULES[kind][key])

    def flag(self, d: Mapping, key: str, where: str, default: bool) -> bool:
        v = d.get(key, default)
        if not isinstance(v, bool):
            self.bad(f"{where}.{key}", f"must be true or false, got {_show(v)}")
            return default
        return v

    def mapping(self, d: Any, where: str, kind: str | None = None) -> Mapping:
        """d if it is an object (else {}); with `kind`, its keys are checked against the schema's."""
        if not isinstance(d, Mapping):
            self.bad(where, f"must be an object, got {type(d).__name__}")
            return {}
        if kind is not None:
            self.known(d, kind, where)
        return d

    def known(self, d: Mapping, kind: str, where: str) -> None:
        allowed = SCHEMA_KEYS[kind]
        if allowed.issuperset(d):
            return
        for key in d:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                name = key if isinstance(key, str) and len(key) <= 60 else _show(key)
                self.bad(f"{where}.{name}" if where != "round" else name,
                         f"unknown key; {hint}use {', '.join(sorted(allowed))}")

    def sequence(self, d: Mapping, key: str, where: str) -> list:
        v = d.get(key, [])
        if not isinstance(v, list):
            self.bad(f"{where}.{key}", f"must be a list, got {type(v).__name__}")
            return []
        return v


def _parse_slowdown(ck: _Checker, raw: Any, where: str, gpus: int) -> dict[str, tuple[float, ...]]:
    """{class: [factor per GPU index]}: one positive factor for each of the node's GPUs."""
    raw = ck.mapping(raw, where)
    out = {}
    for app_class, factors in raw.items():
        w = f"{where}.{app_class}"
        if not isinstance(factors, list) or len(factors) != gpus:
            ck.bad(w, f"must list one factor per GPU ({gpus}), e.g. [1.0, 1.0, 1.3, 1.0]")
            continue
        values = [ck.number({f"[{k}]": f}, f"[{k}]", w, 1.0, positive=True, maximum=MAX_SLOWDOWN) for k, f in enumerate(factors)]
        out[str(app_class)] = tuple(values)
    return out


def _parse_topology(ck: _Checker, raw: Any, node_ids: list[str]) -> Topology | None:
    """The compact spec {racks: [{id, nodes, uplink_gbps}], node_gbps, gpu_gbps,
    across_node_factor}, or {graph: networkx node-link JSON, across_node_factor}."""
    from schedlab.topology import topology_from_graph

    where = "cluster.topology"
    raw = ck.mapping(raw, where, "topology")
    d = Topology()
    factor = ck.field(raw, "topology", "across_node_factor", where, d.across_node_factor)
    if "graph" in raw:
        if "racks" in raw:
            ck.bad(where, "give racks or graph, not both")
        try:
            return topology_from_graph(raw["graph"], node_ids, factor)
        except ValueError as exc:
            ck.bad(f"{where}.graph", str(exc))
            return None
    racks: list[Rack] = []
    placed: dict[str, str] = {}
    for i, rr in enumerate(ck.sequence(raw, "racks", where)):
        w = f"{where}.racks[{i}]"
        rr = ck.mapping(rr, w, "rack")
        rack_id = rr.get("id", f"r{i}")
        members = rr.get("nodes")
        if not isinstance(members, list) or not all(isinstance(n, str) for n in members):
            ck.bad(f"{w}.nodes", "must be a list of node ids")
            continue
        for n in members:
            if n not in node_ids:
                ck.bad(f"{w}.nodes", f"node {_show(n)} is not in cluster.nodes")
            elif n in placed:
                ck.bad(f"{w}.nodes", f"node {_show(n)} is also in rack {_show(placed[n])}; a node has one rack")
            placed[n] = str(rack_id)
        racks.append(Rack(str(rack_id), tuple(members),
                          ck.field(rr, "rack", "uplink_gbps", w, Rack.uplink_gbps)))
    unplaced = [n for n in node_ids if n not in placed]
    if racks and unplaced:
        ck.bad(f"{where}.racks", f"node {_show(unplaced[0])} is in no rack; list every node in one rack")
    if not racks:
        racks = [Rack("r0", tuple(node_ids))]
    return Topology(tuple(racks), ck.field(raw, "topology", "node_gbps", where, d.node_gbps),
                    ck.field(raw, "topology", "gpu_gbps", where, d.gpu_gbps), factor)


def _parse_cluster(ck: _Checker, raw: Any) -> Cluster:
    raw = ck.mapping(raw, "cluster", "cluster")
    nodes, seen = [], set()
    for i, rn in enumerate(ck.sequence(raw, "nodes", "cluster")):
        where = f"cluster.nodes[{i}]"
        rn = ck.mapping(rn, where, "node")
        node_id = rn.get("id")
        if not _is_id(node_id):
            ck.bad(f"{where}.id", f"must be a non-empty string of at most {MAX_ID_CHARS} characters, got {_show(node_id)}")
            continue
        if node_id in seen:
            ck.bad(f"{where}.id", f"duplicate node id {_show(node_id)}; node ids must be unique")
        seen.add(node_id)
        gpus = rn.get("gpus")
        if type(gpus) is not int or not 0 <= gpus <= MAX_GPUS_PER_NODE:  # the common case is a plain count
            gpus = ck.number(rn, "gpus", where, default=0, minimum=0, integer=True, required=True)
        if gpus > MAX_GPUS_PER_NODE:
            ck.bad(f"{where}.gpus", f"{gpus} is above the limit of {MAX_GPUS_PER_NODE} GPUs per node; split the node")
            gpus = 0
        gpu_type = rn.get("gpu_type", "default")
        if not isinstance(gpu_type, str):
            ck.bad(f"{where}.gpu_type", f"must be a string, got {_show(gpu_type)}")
            gpu_type = "default"
        slowdown = _parse_slowdown(ck, rn["slowdown"], f"{where}.slowdown", gpus) if "slowdown" in rn else {}
        nodes.append(Node(node_id, gpus, gpu_type, slowdown))
    total = sum(n.gpus for n in nodes)
    if len(nodes) > MAX_NODES or total > MAX_GPUS:
        ck.bad("cluster.nodes", f"{len(nodes):,} nodes with {total:,} GPUs; a round takes at most {MAX_NODES:,} nodes "
               f"and {MAX_GPUS:,} GPUs: split the cluster into rounds of its partitions")
        nodes = []
    if not nodes and not ck.problems:
        ck.bad("cluster.nodes", "must list at least one node, e.g. [{\"id\": \"n0\", \"gpus\": 4}]")
    topology = _parse_topology(ck, raw["topology"], [n.id for n in nodes]) if "topology" in raw else None
    return Cluster(tuple(nodes), topology)


def _parse_params(ck: _Checker, raw: Any, where: str) -> ThroughputParams | None:
    raw = ck.mapping(raw, where, "params")
    # seconds (alpha) and seconds per example or GPU (beta), within the schema's range; gamma's
    # range is checked below, with what it means
    values = [ck.number(raw, k, where, minimum=0.0, required=True) if k == "gamma"
              else ck.field(raw, "params", k, where, required=True) for k in PARAM_NAMES]
    if any(v is None for v in values):
        return None
    if not 1.0 <= values[-1] <= 10.0:
        ck.bad(f"{where}.gamma", f"must be in Pollux's [1, 10] (how compute and sync overlap: 1 not at all, "
               f"large fully), got {values[-1]}")
        return None
    return ThroughputParams(*values)


def _parse_throughput(ck: _Checker, raw: Any, where: str, gpu_types: frozenset[str]) -> dict[str, ThroughputParams]:
    """Either one parameter set for every GPU type, or {gpu_type: parameter set}."""
    raw = ck.mapping(raw, where)
    if set(raw) & set(PARAM_NAMES):
        p = _parse_params(ck, raw, where)
        return {t: p for t in gpu_types} if p else {}
    out = {t: _parse_params(ck, v, f"{where}.{t}") for t, v in raw.items()}
    return {t: p for t, p in out.items() if p}


def _parse_job(ck: _Checker, raw: Any, i: int, cluster: Cluster) -> JobSpec | None:
    where = f"jobs[{i}]"
    raw = ck.mapping(raw, where, "job")
    job_id = raw.get("id")
    if not _is_id(job_id):
        ck.bad(f"{where}.id", f"must be a non-empty string of at most {MAX_ID_CHARS} characters, got {_show(job_id)}")
        return None
    gpu_types = cluster.gpu_types
    app = raw.get("application")
    profile = None
    if app is not None:
        profile = shipped_profiles().get(app) if isinstance(app, str) else None
        if profile is None:
            ck.bad(f"{where}.application", f"unknown application {_show(app)}; use one of "
                   f"{', '.join(sorted(shipped_profiles()))}, or give throughput_params, grad_stats and batch inline")
            return None
    elif not all(k in raw for k in ("throughput_params", "grad_stats", "batch")):
        ck.bad(where, "needs an application name, or throughput_params, grad_stats and batch inline")
        return None

    throughput = ({t: profile.params for t in gpu_types} if profile and "throughput_params" not in raw
                  else _parse_throughput(ck, raw.get("throughput_params"), f"{where}.throughput_params", gpu_types))
    if "grad_stats" in raw:
        g = ck.mapping(raw["grad_stats"], f"{where}.grad_stats", "grad_stats")
        grad = GradStats(*(ck.field(g, "grad_stats", k, f"{where}.grad_stats", 0.0, required=True)
                           for k in ("sqr", "var")))
    else:
        assert profile is not None, "checked above: an application or all three inline"
        grad = profile.grad_stats
    if "batch" in raw:
        b = ck.mapping(raw["batch"], f"{where}.batch", "batch")
        vals = [ck.field(b, "batch", k, f"{where}.batch", 1, required=True) for k in BATCH_NAMES]
        batch = BatchLimits(*vals)
        if batch.min_local_bsz > batch.max_local_bsz or batch.init_bsz > batch.max_bsz:
            ck.bad(f"{where}.batch", "needs min_local_bsz <= max_local_bsz and init_bsz <= max_bsz")
        elif batch.min_local_bsz > batch.max_bsz:
            ck.bad(f"{where}.batch", f"min_local_bsz {batch.min_local_bsz} is above max_bsz {batch.max_bsz}: no GPU "
                   "count can run it; lower min_local_bsz or raise max_bsz")
    else:
        assert profile is not None, "checked above: an application or all three inline"
        batch = profile.batch

    total = cluster.total_gpus  # 0: every node drained, a valid round in which no job runs
    default_max = min(max(batch.max_bsz // batch.min_local_bsz, 1), total) or 1
    min_gpus = ck.field(raw, "job", "min_gpus", where, 1)
    max_gpus = ck.field(raw, "job", "max_gpus", where, default_max)
    if min_gpus > total > 0:
        ck.bad(f"{where}.min_gpus", f"{min_gpus} exceeds the cluster's {total} GPUs; lower it or add nodes")
    if max_gpus < min_gpus:
        ck.bad(f"{where}.max_gpus", f"{max_gpus} is below min_gpus {min_gpus}; raise max_gpus")
    current = []
    gpu_index = _FIELD_ACCEPT["gpu"]["gpu"]
    for k, rg in enumerate(ck.sequence(raw, "current_gpus", where)):
        if (type(rg) is dict and len(rg) == 2 and type(node := rg.get("node")) is str
                and type(gpu := rg.get("gpu")) is int and gpu_index.int_lo <= gpu <= gpu_index.int_hi):
            current.append(GpuRef(node, gpu))  # the common case, checked whole; the rest below
            continue
        gw = f"{where}.current_gpus[{k}]"
        rg = ck.mapping(rg, gw, "gpu")
        node, gpu = rg.get("node"), ck.field(rg, "gpu", "gpu", gw, 0, required=True)
        if not isinstance(node, str):
            ck.bad(f"{gw}.node", f"must be a node id string, got {_show(node)}")
            continue
        current.append(GpuRef(node, gpu))
    fixed = ck.field(raw, "job", "fixed_bsz", where, None)
    return JobSpec(
        id=job_id, throughput=throughput, grad_stats=grad, batch=batch,
        min_gpus=min_gpus, max_gpus=max_gpus, current_gpus=tuple(current),
        age_s=ck.field(raw, "job", "age_s", where, 0.0),
        num_restarts=ck.field(raw, "job", "num_restarts", where, 0),
        fixed_bsz=fixed, restart_cost_s=ck.field(raw, "job", "restart_cost_s", where, None),
        application=app,
        requested_gpus=ck.field(raw, "job", "requested_gpus", where, None),
        requested_bsz=ck.field(raw, "job", "requested_bsz", where, None),
        attained_service_gpu_s=ck.field(raw, "job", "attained_service_gpu_s", where, 0.0),
        remaining_steps=ck.field(raw, "job", "remaining_steps", where, None),
        freezing=_parse_freezing(ck, raw["freezing"], f"{where}.freezing", app) if "freezing" in raw else None,
        app_class=_parse_app_class(ck, raw.get("app_class"), f"{where}.app_class"),
    )


def _parse_app_class(ck: _Checker, raw: Any, where: str) -> str | None:
    if raw is not None and not _is_id(raw):
        ck.bad(where, f"must be a class name such as \"classA\" (the cluster's slowdown keys), got {_show(raw)}")
        return None
    return raw


def _groups_key(raw: Any) -> tuple | None:
    """Raw layer groups as a hashable key, or None where they are not plain (a bool would equal
    1 in a key, and odd values get their own messages)."""
    if not isinstance(raw, list) or len(raw) > 1024:
        return None
    key = []
    for rg in raw:
        if type(rg) is not dict:
            return None
        items = tuple(sorted(rg.items()))
        if any(type(v) not in (int, float, str) for _, v in items):
            return None
        key.append(items)
    return tuple(key)


def _parse_groups(ck: _Checker, raw: Mapping, where: str, app: str | None) -> tuple[LayerGroup, ...]:
    if "groups" in raw:
        key = _groups_key(raw["groups"])
        if key in ck.layer_groups:  # the jobs of one model share a profile: parsed and checked once
            return ck.layer_groups[key]
        found = len(ck.problems)
        groups = []
        for k, rg in enumerate(ck.sequence(raw, "groups", where)):
            gw = f"{where}.groups[{k}]"
            rg = ck.mapping(rg, gw, "group")
            name = rg.get("name", f"group{k}")
            groups.append(LayerGroup(str(name), *(ck.field(rg, "group", key, gw, 1.0, required=True)
                                                   for key in ("forward", "backward", "params"))))
        if len(groups) < 2:
            ck.bad(f"{where}.groups", "needs at least 2 layer groups (the last one always trains)")
        elif sum(g.backward for g in groups) <= 0 or sum(g.params for g in groups) <= 0:
            ck.bad(f"{where}.groups", "need some backward cost and some parameters: freezing saves backward "
                   "compute and all-reduce of parameters, and with none of either it changes nothing")
        if key is not None and len(ck.problems) == found:
            ck.layer_groups[key] = tuple(groups)
        return tuple(groups)
    profile = raw.get("profile", app)
    if profile not in LAYER_PROFILES:
        ck.bad(f"{where}.profile", f"unknown layer profile {_show(profile)}; use one of {', '.join(sorted(LAYER_PROFILES))}, "
               "or give groups [{forward, backward, params}, ...]")
        return ()
    return layer_profile(profile)


def _parse_freezing(ck: _Checker, raw: Any, where: str, app: str | None) -> FreezeSpec | None:
    raw = ck.mapping(raw, where, "freezing")
    groups = _parse_groups(ck, raw, where, app)
    pen = ck.mapping(raw.get("penalty", {}), f"{where}.penalty", "penalty")
    d = FreezePenalty()
    penalty = FreezePenalty(*(ck.field(pen, "penalty", k, f"{where}.penalty", getattr(d, k)) for k in PENALTY_NAMES))
    progress = ck.number(raw, "progress", where, 0.0, minimum=0.0, required=True)
    if progress is not None and progress > 1.0:
        ck.bad(f"{where}.progress", f"is the fraction of training done, in [0, 1]; got {_show(progress)}")
    top = len(groups) - 1
    min_frozen = ck.field(raw, "freezing", "min_frozen", where, 0)
    max_frozen = ck.field(raw, "freezing", "max_frozen", where, None)
    if groups and (max_frozen if max_frozen is not None else top) > top:
        ck.bad(f"{where}.max_frozen", f"{max_frozen} leaves no group training; use at most {top}")
    if max_frozen is not None and min_frozen > max_frozen:
        ck.bad(f"{where}.min_frozen", f"{min_frozen} is above max_frozen {max_frozen}; lower it")
    if groups and min_frozen > top:
        ck.bad(f"{where}.min_frozen", f"{min_frozen} leaves no group training; use at most {top}")
    return FreezeSpec(
        groups=groups, progress=progress,
        total_steps=ck.field(raw, "freezing", "total_steps", where, 1.0, required=True),
        budget_left=ck.field(raw, "freezing", "budget_left", where, 0.0, required=True),
        min_frozen=min_frozen, max_frozen=max_frozen, penalty=penalty,
    )


def _check_current_gpus(ck: _Checker, jobs: list[JobSpec], cluster: Cluster) -> None:
    nodes = {n.id: n for n in cluster.nodes}
    holder: dict[GpuRef, str] = {}
    for i, job in enumerate(jobs):
        types = set()
        where = f"jobs[{i}].current_gpus"
        for ref in job.current_gpus:
            if ref.node not in nodes:
                ck.bad(where, f"node {_show(ref.node)} is not in the cluster")
                continue
            if ref.gpu >= nodes[ref.node].gpus:
                ck.bad(where, f"GPU {ref.gpu} does not exist on node {_show(ref.node)} ({nodes[ref.node].gpus} GPUs)")
            if ref in holder:
                ck.bad(where, f"GPU {ref.node}:{ref.gpu} is also held by job {_show(holder[ref])}")
            holder[ref] = job.id
            types.add(nodes[ref.node].gpu_type)
        if len(types) > 1:
            ck.bad(f"jobs[{i}].current_gpus", f"mixes GPU types {sorted(types)}; a job runs on one type")
        elif types and not types <= set(job.throughput):
            ck.bad(f"jobs[{i}].current_gpus", f"runs on GPU type {_show(min(types))}, for which the job has no "
                   f"throughput_params (it has {', '.join(sorted(job.throughput)) or 'none'}); add them")


def _parse_settings(ck: _Checker, raw: Any) -> Settings:
    raw = ck.mapping(raw, "settings", "settings")
    d = Settings()
    p = raw.get("p", d.p)
    if isinstance(p, str) and p in _MAX_MIN or isinstance(p, float) and p == -math.inf:
        p = -math.inf
    elif isinstance(p, bool) or not isinstance(p, (int, float)) or not abs(p) <= 1e3:  # NaN and huge ints too
        ck.bad("settings.p", f"must be a number or \"-inf\" (max-min), a finite p within [-1000, 1000]; got {_show(p)}")
        p = d.p
    from schedlab.formulations import FORMULATIONS

    formulation = raw.get("formulation", d.formulation)
    if not isinstance(formulation, str) or formulation not in FORMULATIONS:
        ck.bad("settings.formulation", f"unknown formulation {_show(formulation)}; use one of {', '.join(FORMULATIONS)}")
        formulation = d.formulation
    from schedlab.solvers.registry import SOLVERS

    solver = raw.get("solver", d.solver)
    if not isinstance(solver, str) or solver not in SOLVERS:
        ck.bad("settings.solver", f"unknown solver {_show(solver)}; use one of {', '.join(SOLVERS)}")
        solver = d.solver
    return Settings(
        formulation=formulation,
        p=float(p),
        restart_cost_s=ck.field(raw, "settings", "restart_cost_s", "settings", d.restart_cost_s),
        unallocated_penalty=ck.field(raw, "settings", "unallocated_penalty", "settings", d.unallocated_penalty),
        solver=solver,
        time_limit_s=ck.field(raw, "settings", "time_limit_s", "settings", d.time_limit_s),
        mip_gap=ck.field(raw, "settings", "mip_gap", "settings", d.mip_gap),
        seed=ck.field(raw, "settings", "seed", "settings", d.seed),
        tier_tolerance=ck.field(raw, "settings", "tier_tolerance", "settings", d.tier_tolerance),
        lp_first=ck.flag(raw, "lp_first", "settings", d.lp_first),
        partitions=ck.field(raw, "settings", "partitions", "settings", d.partitions),
        solver_options=_parse_solver_options(ck, raw.get("solver_options", {}), solver),
    )


_OPTIONS_SPEC = _OBJECTS["settings"]["properties"]["solver_options"]
_OPTION_NAME = re.compile(_OPTIONS_SPEC["propertyNames"]["pattern"])
_OPTION_NUMBER, _OPTION_TEXT = (next(s for s in _OPTIONS_SPEC["additionalProperties"]["oneOf"] if s["type"] == t)
                                for t in ("number", "string"))


def _parse_solver_options(ck: _Checker, raw: Any, solver: str) -> tuple[tuple[str, bool | int | float | str], ...]:
    """{name: value} as the solver's options; names and values checked here, their meaning by
    the solver when it takes them (an option it does not know is an InputError naming it)."""
    where = "settings.solver_options"
    raw = ck.mapping(raw, where)
    if len(raw) > _OPTIONS_SPEC["maxProperties"]:
        ck.bad(where, f"{len(raw)} options; at most {_OPTIONS_SPEC['maxProperties']}")
        return ()
    if raw and solver == "portfolio":
        ck.bad(where, "portfolio runs two solvers (highs and cpsat): set settings.solver to the one the options are for")
        return ()
    out = []
    for name, value in raw.items():
        if not isinstance(name, str) or not _OPTION_NAME.fullmatch(name):
            ck.bad(where, f"option name {_show(name)} must be a solver's option name (letters, digits, _ and .)")
            continue
        if isinstance(value, str):
            problem = (None if len(value) <= _OPTION_TEXT["maxLength"]
                       else f"must be at most {_OPTION_TEXT['maxLength']} characters, got {len(value)}")
        elif isinstance(value, bool):
            problem = None
        else:
            problem = _number_problem(value, _OPTION_NUMBER["minimum"], False, False, _OPTION_NUMBER["maximum"])
        if problem:
            ck.bad(f"{where}.{name}", f"{problem} (an option is true/false, a number or a string)")
            continue
        out.append((name, value))
    return tuple(out)


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with every text cell that a spreadsheet would run as a formula (a job named
    "=HYPERLINK(...)") quoted by a leading apostrophe: names written to CSV are data."""
    def safe(value: Any) -> Any:
        return "'" + value if isinstance(value, str) and value.startswith(_FORMULA_START) else value

    text = frame.select_dtypes(include=["object", "string"]).columns
    return frame.assign(**{c: frame[c].map(safe) for c in text}) if len(text) else frame


def text_table(frame: pd.DataFrame, fmt: str, right: list[bool]) -> str:
    """A frame of display-ready cells as a Markdown ("md") or booktabs LaTeX ("latex") table, the
    columns flagged in `right` right-aligned; cells are printed as written (no number parsing)."""
    from tabulate import tabulate

    return tabulate(frame, headers="keys", tablefmt={"md": "github", "latex": "latex_booktabs"}[fmt],
                    showindex=False, disable_numparse=True, colalign=["right" if r else "left" for r in right])


def load_json(data: bytes, source: str) -> Any:
    """A round's bytes as JSON: UTF-8, standard JSON only (no NaN or Infinity), numbers of sane
    size, nesting Python can follow; InputError naming the place otherwise."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError([f"{source}: not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}); "
                          "save the round as UTF-8"]) from None

    def non_finite(token: str) -> None:
        raise InputError([f"{source}: {token} is not a JSON number; use a finite number"])

    try:
        return json.loads(text, parse_constant=non_finite)
    except json.JSONDecodeError as exc:
        raise InputError([f"{source}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"]) from None
    except ValueError as exc:  # Python's limit on integer digits
        raise InputError([f"{source}: a number is too large to read ({exc}); numbers must be at most 2**53"]) from None
    except RecursionError:
        raise InputError([f"{source}: nested too deeply to read; a round nests a few levels"]) from None


def parse_round_input(raw: Any) -> RoundInput:
    """Validate a JSON-like dict and build the RoundInput; InputError lists every problem."""
    ck = _Checker()
    raw = ck.mapping(raw, "round", "round")
    cluster = _parse_cluster(ck, raw.get("cluster"))
    jobs: list[JobSpec] = []
    first_index: dict[str, int] = {}
    if "jobs" not in raw:
        ck.bad("jobs", "is required (a list, possibly empty)")
    raw_jobs = ck.sequence(raw, "jobs", "round")
    if len(raw_jobs) > MAX_JOBS:
        ck.bad("jobs", f"{len(raw_jobs):,} jobs; a round takes at most {MAX_JOBS:,}: send the rest in a later round")
        raw_jobs = []
    for i, rj in enumerate(raw_jobs):
        job = _parse_job(ck, rj, i, cluster)
        if job is None:
            continue
        if job.id in first_index:
            ck.bad(f"jobs[{i}].id", f"duplicate id {_show(job.id)} (also jobs[{first_index[job.id]}]); ids must be unique")
            continue
        first_index[job.id] = i
        jobs.append(job)
    _check_current_gpus(ck, jobs, cluster)
    settings = _parse_settings(ck, raw.get("settings", {}))
    round_s = ck.field(raw, "round", "round_s", "round", RoundInput.round_s)
    if ck.problems:
        raise InputError(ck.problems)
    return RoundInput(cluster, tuple(jobs), settings, round_s)


def _fields(obj) -> dict[str, Any]:
    """A flat dataclass as a dict (dataclasses.asdict deep-copies, ~10x slower)."""
    return dict(obj.__dict__)


def round_input_to_dict(ri: RoundInput) -> dict[str, Any]:
    """The JSON form of a RoundInput; parse_round_input(round_input_to_dict(x)) == x."""
    jobs = []
    for job in ri.jobs:
        d: dict[str, Any] = {"id": job.id}
        if job.application:
            d["application"] = job.application
        d["throughput_params"] = {t: _fields(p) for t, p in job.throughput.items()}
        d["grad_stats"] = _fields(job.grad_stats)
        d["batch"] = _fields(job.batch)
        d |= {"min_gpus": job.min_gpus, "max_gpus": job.max_gpus, "age_s": job.age_s, "num_restarts": job.num_restarts}
        if job.current_gpus:
            d["current_gpus"] = [{"node": g.node, "gpu": g.gpu} for g in job.current_gpus]
        if job.fixed_bsz is not None:
            d["fixed_bsz"] = job.fixed_bsz
        for key in ("restart_cost_s", "requested_gpus", "requested_bsz", "remaining_steps"):
            if getattr(job, key) is not None:
                d[key] = getattr(job, key)
        if job.attained_service_gpu_s:
            d["attained_service_gpu_s"] = job.attained_service_gpu_s
        if job.freezing is not None:
            d["freezing"] = _freezing_to_dict(job.freezing)
        if job.app_class is not None:
            d["app_class"] = job.app_class
        jobs.append(d)
    settings = _fields(ri.settings)
    if ri.settings.max_min:
        settings["p"] = "-inf"
    options = settings.pop("solver_options")
    if options:
        settings["solver_options"] = dict(options)
    return {"cluster": cluster_to_dict(ri.cluster), "jobs": jobs, "settings": settings, "round_s": ri.round_s}


def cluster_to_dict(cluster: Cluster) -> dict[str, Any]:
    nodes = []
    for n in cluster.nodes:
        d: dict[str, Any] = {"id": n.id, "gpus": n.gpus, "gpu_type": n.gpu_type}
        if n.slowdown:
            d["slowdown"] = {c: list(f) for c, f in n.slowdown.items()}
        nodes.append(d)
    out: dict[str, Any] = {"nodes": nodes}
    t = cluster.topology
    if t is not None:
        out["topology"] = {"racks": [{"id": r.id, "nodes": list(r.nodes), "uplink_gbps": r.uplink_gbps} for r in t.racks],
                           "node_gbps": t.node_gbps, "gpu_gbps": t.gpu_gbps, "across_node_factor": t.across_node_factor}
    return out


def _freezing_to_dict(f: FreezeSpec) -> dict[str, Any]:
    d = {"groups": [_fields(g) for g in f.groups], "progress": f.progress, "total_steps": f.total_steps,
         "budget_left": f.budget_left, "min_frozen": f.min_frozen, "penalty": _fields(f.penalty)}
    if f.max_frozen is not None:
        d["max_frozen"] = f.max_frozen
    return d


def json_text(obj: Any, indent: int | None = None) -> str:
    """JSON as every schedlab output writes it: standard JSON only, a NaN or infinity (a job that
    never finished, a gap without a bound) written as null."""
    return json.dumps(_nulls(obj), indent=indent, allow_nan=False)


def _nulls(v: Any) -> Any:
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Mapping):
        return {k: _nulls(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_nulls(x) for x in v]
    return v


def error_to_dict(exc: SchedlabError) -> dict[str, Any]:
    """A refused round as JSON: {"error": "invalid_input", "problems": [one per bad field]} for
    bad input, else {"error": "failed", "problems": [the reason]}."""
    if isinstance(exc, InputError):
        return {"error": "invalid_input", "problems": exc.problems}
    return {"error": "failed", "problems": [str(exc)]}


def round_result_from_dict(raw: Mapping[str, Any]) -> RoundResult:
    """A result as round_result_to_dict (or the service) writes it, back as a RoundResult
    (null objective, bound or gap as NaN, NaN and infinity)."""
    allocations = tuple(JobAllocation(
        a["job_id"], tuple(GpuRef(g["node"], g["gpu"]) for g in a["gpus"]), a["total_bsz"], a["local_bsz"],
        a["accum_steps"], a["goodput"], a["speedup"], a["restarted"], a["frozen_groups"], a["freeze_penalty"])
        for a in raw["allocations"])
    number = lambda key, missing: missing if raw[key] is None else raw[key]  # noqa: E731
    return RoundResult(allocations, Status(raw["status"]), raw["solver"], number("objective", math.nan),
                       number("bound", math.nan), number("gap", math.inf), raw["build_s"], raw["solve_s"],
                       raw["verified"], raw["message"], raw["options_s"])


def round_result_to_dict(res: RoundResult) -> dict[str, Any]:
    allocations = []
    for a in res.allocations:
        allocations.append({
            "job_id": a.job_id, "gpus": [_fields(g) for g in a.gpus], "num_gpus": a.num_gpus,
            "num_nodes": a.num_nodes, "total_bsz": a.total_bsz, "local_bsz": a.local_bsz,
            "accum_steps": a.accum_steps, "goodput": a.goodput, "speedup": a.speedup, "restarted": a.restarted,
            "frozen_groups": a.frozen_groups, "freeze_penalty": a.freeze_penalty,
        })
    return {
        "status": res.status, "solver": res.solver, "objective": _nulls(res.objective),
        "bound": _nulls(res.bound), "gap": _nulls(res.gap), "build_s": res.build_s,
        "options_s": res.options_s, "solve_s": res.solve_s, "verified": res.verified, "message": res.message,
        "allocations": allocations,
    }
