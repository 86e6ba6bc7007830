"""A round -> a checked RoundInput, with validation that names every bad field and its fix.

The format is published as JSON Schema in schedlab/schemas/. Parsing collects every problem
before raising one InputError, so a caller fixes its input in one pass. A round given as its
dataclasses passes the same rules (checker.DataChecker), without a trip through JSON.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from schedlab.errors import InputError
from schedlab.io.checker import Checker, DataChecker, is_id, kept_numbers, number_problem, show, valid_ids
from schedlab.io.jobs import check_current_gpus, parse_job, valid_as_given
from schedlab.io.schema import (
    FIELD_ACCEPT,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_ID_CHARS,
    MAX_JOBS,
    MAX_NODES,
    MAX_SLOWDOWN,
    OPTION_NAME,
    OPTION_NUMBER,
    OPTION_TEXT,
    OPTIONS_SPEC,
    SCHEMA,
)
from schedlab.state import Cluster, JobSpec, Node, Rack, RoundInput, Settings, Topology

if TYPE_CHECKING:
    from schedlab.solvers.registry import SolverEntry

__all__ = ["load_json", "parse_round_input"]

_MAX_MIN = ("-inf", "max-min")
_MAX_SPEED = SCHEMA["properties"]["cluster"]["properties"]["gpu_speed"]["additionalProperties"]["maximum"]
_ROUND_S_FIX = f"give the round's length in seconds, e.g. {RoundInput.round_s:g}"
_REAL = (int, float)  # a number's exact types in a fast path: not bool (True == 1), not a str


def load_json(data: bytes, source: str) -> Any:
    """A round's bytes as JSON: UTF-8, standard JSON only (no NaN or Infinity, each named by its
    field), numbers of sane size, nesting Python can follow; InputError naming the place otherwise."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError([f"{source}: not UTF-8 text (byte {exc.start} is {data[exc.start]:#04x}); "
                          "save the round as UTF-8"]) from None
    constants: list[_Constant] = []

    def constant(token: str) -> _Constant:  # Python's json reads NaN and Infinity: mark them, name them below
        constants.append(_Constant(token))
        return constants[-1]

    try:
        raw = json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise InputError([f"{source}: not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"]) from None
    except ValueError as exc:  # Python's limit on integer digits
        raise InputError([f"{source}: a number is too large to read ({exc}); numbers must be at most 2**53"]) from None
    except RecursionError:
        raise InputError([f"{source}: nested too deeply to read; a round nests a few levels"]) from None
    if constants:
        raise InputError(_constant_problems(raw, constants, source))
    return raw


class _Constant:
    """A NaN, Infinity or -Infinity token where the JSON has a value: JSON has none of them."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token


_CONSTANTS_SHOWN = 10  # a round of NaNs is answered with the first few, and how many more


def _constant_problems(raw: Any, constants: list[_Constant], source: str) -> list[str]:
    """One problem per NaN or Infinity, named by its field's path (`jobs[0].batch.max_bsz`)."""
    fix = "JSON has no NaN or Infinity; write a finite number, or leave the field out for its default"
    found = [f"{source}: {path or 'the round'}: {value.token} is not a JSON number ({fix})"
             for path, value in _paths(raw) if isinstance(value, _Constant)]
    dropped = len(constants) - len(found)  # under a key given twice, whose last value JSON keeps
    if dropped:
        found.append(f"{source}: {constants[0].token} is not a JSON number, under a key given twice ({fix})")
    if len(found) > _CONSTANTS_SHOWN:
        found[_CONSTANTS_SHOWN:] = [f"{source}: and {len(found) - _CONSTANTS_SHOWN} more NaN or Infinity values"]
    return found


def _paths(raw: Any) -> Iterator[tuple[str, Any]]:
    """Every value of `raw` with its path as the checker names fields, in document order; a loop,
    not recursion, as json.loads nests deeper than Python's recursion limit allows a walk."""
    stack: list[tuple[str, Any]] = [("", raw)]
    while stack:
        path, value = stack.pop()
        yield path, value
        if isinstance(value, dict):
            stack.extend(reversed([(_key_path(path, key), v) for key, v in value.items()]))
        elif isinstance(value, list):
            stack.extend(reversed([(f"{path}[{i}]", v) for i, v in enumerate(value)]))


def _key_path(path: str, key: str) -> str:
    name = key if len(key) <= 60 else show(key)
    return f"{path}.{name}" if path else name


def parse_round_input(raw: Any, overrides: Mapping[str, Any] | None = None) -> RoundInput:
    """A round checked field by field and built as a RoundInput; InputError lists every problem.

    Parameters
    ----------
    raw
        The round: its JSON (a dict as json.loads reads it), or a RoundInput. A RoundInput is
        read through its fields, never turned into JSON: both forms pass the same rules and
        get the same messages (`jobs[3].batch.max_local_bsz: ...`).
    overrides
        Settings fields in their JSON form (solve_round's keywords, the CLI's flags) that replace
        the round's own, checked as its fields are.
    """
    if isinstance(raw, RoundInput):
        return _parse_round(DataChecker({"settings": overrides or {}}), raw)
    return _parse_round(Checker(), _with_overrides(raw, overrides) if overrides else raw)


def _with_overrides(raw: Any, overrides: Mapping[str, Any]) -> Mapping[str, Any]:
    """The round's JSON with `overrides` in place of its settings' own fields."""
    if not isinstance(raw, Mapping):
        raise InputError([f"round: must be an object, got {type(raw).__name__}"])
    settings = raw.get("settings", {})
    return {**raw, "settings": {**(settings if isinstance(settings, Mapping) else {}), **overrides}}


def _parse_round(ck: Checker, raw: Any) -> RoundInput:
    raw = ck.mapping(raw, "round", "round")
    cluster = _parse_cluster(ck, raw.get("cluster"))
    if "jobs" not in raw:
        ck.bad("jobs", "is required (a list, possibly empty)")
    raw_jobs = ck.sequence(raw, "jobs", "round")
    if len(raw_jobs) > MAX_JOBS:
        ck.bad("jobs", f"{len(raw_jobs):,} jobs; a round takes at most {MAX_JOBS:,}: send the rest in a later round")
        raw_jobs = []
    jobs = list(raw_jobs) if valid_as_given(ck, raw_jobs, cluster) else _parse_jobs(ck, raw_jobs, cluster)
    check_current_gpus(ck, jobs, cluster)
    raw_settings = raw.get("settings", {})  # a replay's rounds share one Settings: checked once (DataChecker.once)
    settings = ck.once(raw_settings, "settings", lambda: _parse_settings(ck, raw_settings))
    round_s = ck.field(raw, "round", "round_s", "round", RoundInput.round_s, fix=_ROUND_S_FIX)
    if ck.problems:
        raise InputError(ck.problems)
    return RoundInput(cluster, tuple(jobs), settings, round_s)


def _parse_jobs(ck: Checker, raw_jobs: list | tuple, cluster: Cluster) -> list[JobSpec]:
    """Each job parsed, with its problems in `ck`; a job without a usable id, or whose id an
    earlier job has, is left out."""
    jobs: list[JobSpec] = []
    first_index: dict[str, int] = {}
    for i, rj in enumerate(raw_jobs):
        job = parse_job(ck, rj, i, cluster)
        if job is None:
            continue
        if job.id in first_index:
            ck.bad(f"jobs[{i}].id", f"duplicate id {show(job.id)} (also jobs[{first_index[job.id]}]); ids must be unique")
            continue
        first_index[job.id] = i
        jobs.append(job)
    return jobs


def _parse_slowdown(ck: Checker, raw: Any, where: str, gpus: int) -> dict[str, tuple[float, ...]]:
    """{class: [factor per GPU index]}: one positive factor for each of the node's GPUs."""
    raw = ck.mapping(raw, where)
    out = {}
    for app_class, factors in raw.items():
        w = f"{where}.{app_class}"
        if not ck.is_list(factors) or len(factors) != gpus:
            ck.bad(w, f"must list one factor per GPU ({gpus}), e.g. [1.0, 1.0, 1.3, 1.0]")
            continue
        if all(type(f) in _REAL and 0 < f <= MAX_SLOWDOWN for f in factors):  # the common case, checked whole
            out[str(app_class)] = tuple(float(f) for f in factors)
            continue
        values = [ck.number({f"[{k}]": f}, f"[{k}]", w, 1.0, positive=True, maximum=MAX_SLOWDOWN) for k, f in enumerate(factors)]
        out[str(app_class)] = tuple(values)
    return out


def _parse_topology(ck: Checker, raw: Any, node_ids: list[str]) -> Topology | None:
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
    known = set(node_ids)  # a list's `in` made this check quadratic: 1.2 s for 16,384 nodes
    for i, rr in enumerate(ck.sequence(raw, "racks", where)):
        w = f"{where}.racks[{i}]"
        rr = ck.mapping(rr, w, "rack")
        rack_id = rr.get("id", f"r{i}")
        members = rr.get("nodes")
        if not ck.is_list(members) or not all(isinstance(n, str) for n in members):
            ck.bad(f"{w}.nodes", "must be a list of node ids")
            continue
        for n in members:
            if n not in known:
                ck.bad(f"{w}.nodes", f"node {show(n)} is not in cluster.nodes")
            elif n in placed:
                ck.bad(f"{w}.nodes", f"node {show(n)} is also in rack {show(placed[n])}; a node has one rack")
            placed[n] = str(rack_id)
        racks.append(Rack(str(rack_id), tuple(members),
                          ck.field(rr, "rack", "uplink_gbps", w, Rack.uplink_gbps)))
    unplaced = [n for n in node_ids if n not in placed]
    if racks and unplaced:
        ck.bad(f"{where}.racks", f"node {show(unplaced[0])} is in no rack; list every node in one rack")
    if not racks:
        racks = [Rack("r0", tuple(node_ids))]
    return Topology(tuple(racks), ck.field(raw, "topology", "node_gbps", where, d.node_gbps),
                    ck.field(raw, "topology", "gpu_gbps", where, d.gpu_gbps), factor)


def _parse_cluster(ck: Checker, raw: Any) -> Cluster:
    """The round's cluster; a Cluster object checked before without problems is not checked
    again (Cluster: a value, never changed in place): a replay hands every round the same one,
    and checking its nodes again each round cost a fifth of the full Philly replay (512 nodes)."""
    if type(raw) is not Cluster:
        return _check_cluster(ck, raw)
    checked = raw.derived.get(_CHECKED)
    if checked is not None:
        return raw if checked is _AS_GIVEN else checked
    if _plain(raw):
        raw.derived[_CHECKED] = _AS_GIVEN
        return raw
    found = len(ck.problems)
    cluster = _check_cluster(ck, raw)
    if len(ck.problems) > found:
        return cluster
    # the given object itself where checking changed nothing: the rounds then share what it
    # remembers (Cluster.derived, Cluster.layout) with their caller, such as a replay, which
    # verifies each answer again on it
    if _identical(raw, cluster):
        raw.derived[_CHECKED] = _AS_GIVEN
        return raw
    raw.derived[_CHECKED] = cluster
    return cluster


_CHECKED = "io.parse: checked"  # Cluster.derived's key of the cluster as checked
# _CHECKED's value where that is the given object itself: a marker, not the object, so that a
# Cluster does not refer to itself, a cycle only Python's collector frees (one a round where a
# scheduler builds its Cluster anew each round)
_AS_GIVEN = "as given"


def _plain(cluster: Cluster) -> bool:
    """Whether `cluster` is what _check_cluster would make of it, without a problem: plain nodes
    (no slowdown), no topology and no GPU speeds, checked a column at a time. A scheduler may build
    its Cluster anew each round, and checking 16 nodes one by one, then comparing the result with
    them, took 0.11 ms, a thirtieth of a 64-GPU round. Any other cluster is checked the long way."""
    nodes = cluster.nodes
    if (type(nodes) is not tuple or not 0 < len(nodes) <= MAX_NODES or set(map(type, nodes)) != {Node}
            or cluster.topology is not None or type(cluster.gpu_speed) is not dict or cluster.gpu_speed):
        return False
    ids, gpus = tuple(n.id for n in nodes), tuple(n.gpus for n in nodes)
    return (valid_ids(ids, optional=False) and len(set(ids)) == len(ids)
            and kept_numbers(gpus, _NODE_GPUS, int, optional=False) and sum(gpus) <= MAX_GPUS
            and all(type(n.gpu_type) is str and type(n.slowdown) is dict and not n.slowdown for n in nodes))


_NODE_GPUS = FIELD_ACCEPT["node"]["gpus"]


def _identical(a: Any, b: Any) -> bool:
    """Whether a and b are equal with every value of the same type (1 and 1.0 are not), through
    dataclasses, tuples, lists and dicts."""
    if type(a) is not type(b):
        return False
    if dataclasses.is_dataclass(a):
        return all(_identical(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(map(_identical, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_identical(v, b[k]) for k, v in a.items())
    return bool(a == b)


def _check_cluster(ck: Checker, raw: Any) -> Cluster:
    raw = ck.mapping(raw, "cluster", "cluster")
    nodes, seen = [], set()
    for i, rn in enumerate(ck.sequence(raw, "nodes", "cluster")):
        where = f"cluster.nodes[{i}]"
        rn = ck.mapping(rn, where, "node")
        node_id = rn.get("id")
        if not is_id(node_id):
            ck.bad(f"{where}.id", f"must be a non-empty string of at most {MAX_ID_CHARS} characters, got {show(node_id)}")
            continue
        if node_id in seen:
            ck.bad(f"{where}.id", f"duplicate node id {show(node_id)}; node ids must be unique")
        seen.add(node_id)
        gpus = rn.get("gpus")
        if type(gpus) is not int or not 0 <= gpus <= MAX_GPUS_PER_NODE:  # the common case is a plain count
            gpus = ck.number(rn, "gpus", where, default=0, minimum=0, integer=True, required=True)
        if gpus > MAX_GPUS_PER_NODE:
            ck.bad(f"{where}.gpus", f"{gpus} is above the limit of {MAX_GPUS_PER_NODE} GPUs per node; split the node")
            gpus = 0
        gpu_type = rn.get("gpu_type", "default")
        if not isinstance(gpu_type, str):
            ck.bad(f"{where}.gpu_type", f"must be a string, got {show(gpu_type)}")
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
    gpu_speed = _parse_gpu_speed(ck, raw.get("gpu_speed", {}))
    return Cluster(tuple(nodes), topology, gpu_speed)


def _parse_gpu_speed(ck: Checker, raw: Any) -> dict[str, float]:
    """{GPU type: relative speed}, each positive; a type the cluster's nodes lack is allowed (a
    speed table shared by clusters), a job fitted on it projecting from it."""
    where = "cluster.gpu_speed"
    raw = ck.mapping(raw, where)
    out = {}
    for gpu_type, speed in raw.items():
        if not isinstance(gpu_type, str):
            ck.bad(where, f"GPU type {show(gpu_type)} must be a string")
            continue
        value = ck.number({gpu_type: speed}, gpu_type, where, positive=True, maximum=_MAX_SPEED)
        if value is not None:
            out[gpu_type] = value
    return out


def _parse_settings(ck: Checker, raw: Any) -> Settings:
    raw = ck.mapping(raw, "settings", "settings")
    d = Settings()
    p = raw.get("p", d.p)
    if isinstance(p, str) and p in _MAX_MIN or isinstance(p, float) and p == -math.inf:
        p = -math.inf
    elif isinstance(p, bool) or not isinstance(p, (int, float)) or not abs(p) <= 1e3:  # NaN and huge ints too
        ck.bad("settings.p", f"must be a number or \"-inf\" (max-min), a finite p within [-1000, 1000]; got {show(p)}")
        p = d.p
    from schedlab.formulations import FORMULATIONS

    formulation = raw.get("formulation", d.formulation)
    if not isinstance(formulation, str) or formulation not in FORMULATIONS:
        ck.bad("settings.formulation", f"unknown formulation {show(formulation)}; use one of {', '.join(FORMULATIONS)}")
        formulation = d.formulation
    from schedlab.solvers.registry import SOLVERS

    solver = raw.get("solver", d.solver)
    if not isinstance(solver, str) or solver not in SOLVERS:
        ck.bad("settings.solver", f"unknown solver {show(solver)}; use one of {', '.join(SOLVERS)}")
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
        solver_options=_parse_solver_options(ck, raw.get("solver_options", {}), SOLVERS[solver]),
    )


def _parse_solver_options(ck: Checker, raw: Any, solver: SolverEntry) -> tuple[tuple[str, bool | int | float | str], ...]:
    """{name: value} as the solver's options; names and values checked here, their meaning by
    the solver when it takes them (an option it does not know is an InputError naming it)."""
    where = "settings.solver_options"
    raw = ck.mapping(raw, where)
    if len(raw) > OPTIONS_SPEC["maxProperties"]:
        ck.bad(where, f"{len(raw)} options; at most {OPTIONS_SPEC['maxProperties']}")
        return ()
    if raw and (refused := solver.options_refused):
        ck.bad(where, f"{refused}: set settings.solver to the one the options are for")
        return ()
    out = []
    for name, value in raw.items():
        if not isinstance(name, str) or not OPTION_NAME.fullmatch(name):
            ck.bad(where, f"option name {show(name)} must be a solver's option name (letters, digits, _ and .)")
            continue
        if isinstance(value, str):
            problem = (None if len(value) <= OPTION_TEXT["maxLength"]
                       else f"must be at most {OPTION_TEXT['maxLength']} characters, got {len(value)}")
        elif isinstance(value, bool):
            problem = None
        else:
            problem = number_problem(value, OPTION_NUMBER["minimum"], False, False, OPTION_NUMBER["maximum"])
        if problem:
            ck.bad(f"{where}.{name}", f"{problem} (an option is true/false, a number or a string)")
            continue
        out.append((name, value))
    return tuple(out)


