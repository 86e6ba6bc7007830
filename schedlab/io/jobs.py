"""A round's jobs from their JSON: throughput parameters, batch limits, layer freezing, and the
GPUs the running ones hold, each field checked as the schema and the models need it.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Mapping
from itertools import chain
from typing import Any

from schedlab.io.checker import Checker, is_id, kept_numbers, show, valid_ids
from schedlab.io.schema import BATCH_NAMES, FIELD_ACCEPT, MAX_ID_CHARS, PARAM_NAMES, PENALTY_NAMES
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
    JobSpec,
    LayerGroup,
    ThroughputParams,
)

__all__ = ["check_current_gpus", "parse_job", "valid_as_given"]

_PARAM_KEYS = frozenset(PARAM_NAMES)


def _parse_params(ck: Checker, raw: Any, where: str) -> ThroughputParams | None:
    """A parameter set, checked once per round for the jobs that share it (Checker.once)."""
    return ck.once(raw, "params", lambda: _check_params(ck, raw, where))


def _check_params(ck: Checker, raw: Any, where: str) -> ThroughputParams | None:
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


def _parse_throughput(ck: Checker, raw: Any, where: str, gpu_types: frozenset[str]) -> dict[str, ThroughputParams]:
    """Either one parameter set for every GPU type, or {gpu_type: parameter set}."""
    raw = ck.mapping(raw, where)
    if not _PARAM_KEYS.isdisjoint(raw):
        p = _parse_params(ck, raw, where)
        return {t: p for t in gpu_types} if p else {}
    out = {}
    for t, v in raw.items():
        if p := _parse_params(ck, v, f"{where}.{t}"):
            out[t] = p
    return out


_SQR, _VAR = FIELD_ACCEPT["grad_stats"]["sqr"], FIELD_ACCEPT["grad_stats"]["var"]


def _check_grad(ck: Checker, raw: Any, where: str) -> GradStats:
    fields = ck.plain(raw, "grad_stats")
    if (fields is not None and len(fields) == 2 and type(sqr := fields.get("sqr")) is float
            and type(var := fields.get("var")) is float and _SQR.float_lo <= sqr <= _SQR.float_hi
            and _VAR.float_lo <= var <= _VAR.float_hi):
        # the common case, checked whole (a GradStats given is kept: it is frozen); the rest below
        return raw if type(raw) is GradStats else GradStats(sqr, var)
    g = ck.mapping(raw, where, "grad_stats")
    return GradStats(ck.field(g, "grad_stats", "sqr", where, 0.0, required=True),
                     ck.field(g, "grad_stats", "var", where, 0.0, required=True))


def _check_batch(ck: Checker, raw: Any, where: str) -> BatchLimits:
    b = ck.mapping(raw, where, "batch")
    batch = BatchLimits(*(ck.field(b, "batch", k, where, 1, required=True) for k in BATCH_NAMES))
    if batch.min_local_bsz > batch.max_local_bsz or batch.init_bsz > batch.max_bsz:
        ck.bad(where, "needs min_local_bsz <= max_local_bsz and init_bsz <= max_bsz")
    elif batch.min_local_bsz > batch.max_bsz:
        ck.bad(where, f"min_local_bsz {batch.min_local_bsz} is above max_bsz {batch.max_bsz}: no GPU "
               "count can run it; lower min_local_bsz or raise max_bsz")
    return batch


def parse_job(ck: Checker, raw: Any, i: int, cluster: Cluster) -> JobSpec | None:
    """The round's job `i` (its fields checked against `cluster`), or None where it has no usable
    id or no model (an application, or its parameters inline); problems go to `ck`."""
    where = f"jobs[{i}]"
    raw = ck.mapping(raw, where, "job")
    job_id = raw.get("id")
    if not is_id(job_id):
        ck.bad(f"{where}.id", f"must be a non-empty string of at most {MAX_ID_CHARS} characters, got {show(job_id)}")
        return None
    gpu_types = cluster.gpu_types
    app = raw.get("application")
    profile = None
    if app is not None:
        profile = shipped_profiles().get(app) if isinstance(app, str) else None
        if profile is None:
            ck.bad(f"{where}.application", f"unknown application {show(app)}; use one of "
                   f"{', '.join(sorted(shipped_profiles()))}, or give throughput_params, grad_stats and batch inline")
            return None
    elif not all(k in raw for k in ("throughput_params", "grad_stats", "batch")):
        ck.bad(where, "needs an application name, or throughput_params, grad_stats and batch inline")
        return None

    throughput = ({t: profile.params for t in gpu_types} if profile and "throughput_params" not in raw
                  else _parse_throughput(ck, raw.get("throughput_params"), f"{where}.throughput_params", gpu_types))
    if "grad_stats" in raw:
        grad = _check_grad(ck, raw["grad_stats"], f"{where}.grad_stats")  # each job its own: not worth a look-up
    else:
        assert profile is not None, "checked above: an application or all three inline"
        grad = profile.grad_stats
    if "batch" in raw:
        batch = ck.once(raw["batch"], "batch", lambda: _check_batch(ck, raw["batch"], f"{where}.batch"))
    else:
        assert profile is not None, "checked above: an application or all three inline"
        batch = profile.batch

    total = cluster.total_gpus  # 0: every node drained, a valid round in which no job runs
    default_max = min(max(batch.max_bsz // batch.min_local_bsz, 1), total) or 1
    min_gpus = ck.field(raw, "job", "min_gpus", where, 1)
    max_gpus = ck.field(raw, "job", "max_gpus", where, default_max)
    _check_gpu_limits(ck, where, min_gpus, max_gpus, total)
    current = []
    gpu_index = FIELD_ACCEPT["gpu"]["gpu"]
    for k, rg in enumerate(ck.sequence(raw, "current_gpus", where)):
        fields = ck.plain(rg, "gpu")
        if (fields is not None and len(fields) == 2 and type(node := fields.get("node")) is str
                and type(gpu := fields.get("gpu")) is int and gpu_index.int_lo <= gpu <= gpu_index.int_hi):
            # the common case, checked whole (a GpuRef given is kept: it is frozen); the rest below
            current.append(rg if type(rg) is GpuRef else GpuRef(node, gpu))
            continue
        gw = f"{where}.current_gpus[{k}]"
        rg = ck.mapping(rg, gw, "gpu")
        node, gpu = rg.get("node"), ck.field(rg, "gpu", "gpu", gw, 0, required=True)
        if not isinstance(node, str):
            ck.bad(f"{gw}.node", f"must be a node id string, got {show(node)}")
            continue
        current.append(GpuRef(node, gpu))
    fixed = ck.field(raw, "job", "fixed_bsz", where, None)
    pinned = ck.flag(raw, "pinned", where, False)
    if pinned:
        _check_pinned(ck, where, len(current), min_gpus, max_gpus)
    projected = cluster.projections(throughput)
    if projected:
        throughput = throughput | projected
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
        batch_by_type=(_parse_batch_by_type(ck, raw["batch_by_type"], f"{where}.batch_by_type", batch, gpu_types)
                       if raw.get("batch_by_type") else {}),
        pinned=pinned,
        projected_types=_parse_projected_types(ck, raw, where, throughput, projected),
    )


def _check_gpu_limits(ck: Checker, where: str, min_gpus: int, max_gpus: int, total: int) -> None:
    """A job's GPU limits: some count between them, and min_gpus within the cluster (a cluster of
    0 GPUs, every node drained, is a valid round in which no job runs)."""
    if min_gpus > total > 0:
        ck.bad(f"{where}.min_gpus", f"{min_gpus} exceeds the cluster's {total} GPUs; lower it or add nodes")
    if max_gpus < min_gpus:
        ck.bad(f"{where}.max_gpus", f"{max_gpus} is below min_gpus {min_gpus}; raise max_gpus")


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(JobSpec))
_values = operator.attrgetter(*_FIELD_NAMES)  # a JobSpec's field values, in _FIELD_NAMES's order
# The JobSpec fields that hold a number: each with its schema range, the Python type it has where
# parse_job keeps it as it is (it turns an int into a float where the schema says number), and
# whether it may be None (else parse_job puts its default in None's place)
_NUMBERS = tuple((f.name, accept, int if accept.integer else float, f.default is None)
                 for f in dataclasses.fields(JobSpec) if (accept := FIELD_ACCEPT["job"].get(f.name)))
# The JobSpec fields of other kinds whose values parse_job keeps (or turns into the job's own)
_KINDS = (("throughput", dict), ("current_gpus", tuple), ("batch_by_type", dict), ("pinned", bool),
          ("projected_types", tuple))
_GPU_INDEX = FIELD_ACCEPT["gpu"]["gpu"]
_NODE, _GPU = operator.attrgetter("node"), operator.attrgetter("gpu")
_SQR_OF, _VAR_OF = operator.attrgetter("sqr"), operator.attrgetter("var")


def _node_ids(nodes: tuple, cluster: Cluster) -> bool:
    """Whether the node ids of a round's GPU references are all usable ids (is_id): strings, each
    the cluster's own (a replay's name nothing else), or else each read as an id."""
    return set(map(type, nodes)) == {str} and (set(nodes) <= cluster.node_index.keys() or valid_ids(nodes, optional=False))


def valid_as_given(ck: Checker, jobs: Any, cluster: Cluster) -> bool:
    """Whether `jobs` are JobSpecs that parse_job would each return unchanged, valid and with
    unique ids: the common case of a round given as dataclasses (a replay's jobs), checked field
    by field over the whole round, as parse_job reads each field but without reading every job as
    its JSON object (~10 us a job: two thirds of a 100-job round's parse). Anything else, valid or
    not, is left to parse_job, which names each problem: what this adds to `ck` is taken back."""
    if not jobs or set(map(type, jobs)) != {JobSpec}:
        return not jobs
    fields = dict(zip(_FIELD_NAMES, zip(*map(_values, jobs))))
    refs = list(chain.from_iterable(cluster.unvouched(fields["current_gpus"])))  # the others pass by their layouts
    if not (valid_ids(fields["id"], optional=False) and len(set(fields["id"])) == len(jobs)
            and valid_ids(fields["application"], optional=True) and valid_ids(fields["app_class"], optional=True)
            and set(fields["application"]) - {None} <= shipped_profiles().keys()
            and all(set(map(type, fields[name])) == {kind} for name, kind in _KINDS)
            and _PARAM_KEYS.isdisjoint(set().union(*fields["throughput"])) and fields["freezing"].count(None) == len(jobs)
            and not any(fields["batch_by_type"]) and not any(fields["pinned"]) and not any(fields["projected_types"])
            and all(kept_numbers(fields[name], accept, kind, optional) for name, accept, kind, optional in _NUMBERS)
            and (not refs or (set(map(type, refs)) == {GpuRef} and _node_ids(tuple(map(_NODE, refs)), cluster)
                              and kept_numbers(tuple(map(_GPU, refs)), _GPU_INDEX, int, optional=False)))):
        return False
    grads, lo_gpus, hi_gpus, total = fields["grad_stats"], fields["min_gpus"], fields["max_gpus"], cluster.total_gpus
    # _check_grad's and _check_gpu_limits's checks, a column at a time
    if not (set(map(type, grads)) == {GradStats} and kept_numbers(tuple(map(_SQR_OF, grads)), _SQR, float, optional=False)
            and kept_numbers(tuple(map(_VAR_OF, grads)), _VAR, float, optional=False)
            and not 0 < total < max(lo_gpus) and all(map(operator.le, lo_gpus, hi_gpus))):
        return False
    found = len(ck.problems)
    params = {id(p): p for throughput in fields["throughput"] for p in throughput.values()}
    batches = {id(b): b for b in fields["batch"]}
    kept = (all(_same(p, _parse_params(ck, p, "jobs.throughput_params")) for p in params.values())
            and all(_same(b, ck.once(b, "batch", functools.partial(_check_batch, ck, b, "jobs.batch")))
                    for b in batches.values())
            and not (cluster.gpu_speed and any(map(cluster.projections, fields["throughput"]))))
    if len(ck.problems) > found or not kept:
        del ck.problems[found:]
        return False
    return True


def _same(given: Any, parsed: Any) -> bool:
    """Whether `parsed`, what parse_job made of the dataclass `given`, is `given` field for field,
    each of the same type (a float where an int was given, or the reverse, is not the same)."""
    return given is parsed or (type(given) is type(parsed)
                               and [(type(v), v) for v in vars(given).values()] == [(type(v), v) for v in vars(parsed).values()])


def _check_pinned(ck: Checker, where: str, held: int, min_gpus: int, max_gpus: int) -> None:
    """A pinned job keeps its GPUs: it must hold some, as many as its GPU limits allow."""
    if not held:
        ck.bad(f"{where}.pinned", "the job holds no GPUs (current_gpus is empty); a pinned job keeps the GPUs it "
               "holds: give its current_gpus, or leave pinned out")
    elif not min_gpus <= held <= max_gpus:
        ck.bad(f"{where}.pinned", f"the job holds {held} GPUs, outside its [min_gpus, max_gpus] = [{min_gpus}, "
               f"{max_gpus}], and a pinned job stays on them: widen its GPU limits")


def _parse_batch_by_type(ck: Checker, raw: Any, where: str, batch: BatchLimits,
                         gpu_types: frozenset[str]) -> dict[str, BatchLimits]:
    """{GPU type: the job's batch limits there}: `batch` with the local bounds each entry gives."""
    raw = ck.mapping(raw, where)
    out = {}
    for gpu_type, rb in raw.items():
        if gpu_type not in gpu_types:
            ck.bad(where, f"unknown GPU type {show(gpu_type)}; the cluster's nodes have {', '.join(sorted(gpu_types))}")
            continue
        w = f"{where}.{gpu_type}"
        rb = ck.mapping(rb, w, "batch")
        for key in ("init_bsz", "max_bsz"):  # the total batch does not depend on the GPU
            given = ck.field(rb, "batch", key, w, None)
            if given is not None and given != getattr(batch, key):
                ck.bad(f"{w}.{key}", f"is {given}, not batch.{key} ({getattr(batch, key)}); only min_local_bsz and "
                       "max_local_bsz vary by GPU type: leave it out")
        limits = batch.with_local(ck.field(rb, "batch", "min_local_bsz", w, None),
                                  ck.field(rb, "batch", "max_local_bsz", w, None))
        if limits.min_local_bsz > limits.max_local_bsz:
            ck.bad(w, f"min_local_bsz {limits.min_local_bsz} is above max_local_bsz {limits.max_local_bsz} on this "
                   "GPU type; lower min_local_bsz or raise max_local_bsz")
        elif limits.min_local_bsz > limits.max_bsz:
            ck.bad(w, f"min_local_bsz {limits.min_local_bsz} is above max_bsz {limits.max_bsz}: no GPU count of "
                   "this type can run it; lower min_local_bsz")
        out[gpu_type] = limits
    return out


def _parse_projected_types(ck: Checker, raw: Mapping, where: str, throughput: Mapping[str, ThroughputParams],
                           projected: Mapping[str, ThroughputParams]) -> tuple[str, ...]:
    """The GPU types the job's parameters were projected for: those its `projected_types` names
    (each one it has parameters for) and those projected now, sorted."""
    if not projected and not raw.get("projected_types"):
        return ()
    named = set()
    for k, gpu_type in enumerate(ck.sequence(raw, "projected_types", where)):
        if not isinstance(gpu_type, str) or gpu_type not in throughput:
            ck.bad(f"{where}.projected_types[{k}]", f"{show(gpu_type)} is not a GPU type the job has throughput_params for "
                   f"({', '.join(sorted(throughput)) or 'none'})")
            continue
        named.add(gpu_type)
    return tuple(sorted(named | set(projected)))


def _parse_app_class(ck: Checker, raw: Any, where: str) -> str | None:
    if raw is not None and not is_id(raw):
        ck.bad(where, f"must be a class name such as \"classA\" (the cluster's slowdown keys), got {show(raw)}")
        return None
    return raw


def _groups_key(ck: Checker, raw: Any) -> tuple | None:
    """Raw layer groups as a hashable key, or None where they are not plain (a bool would equal
    1 in a key, and odd values get their own messages)."""
    if not ck.is_list(raw) or len(raw) > 1024:
        return None
    key = []
    for rg in raw:
        fields = ck.plain(rg, "group")
        if fields is None:
            return None
        items = tuple(sorted(fields.items()))
        if any(type(v) not in (int, float, str) for _, v in items):
            return None
        key.append(items)
    return tuple(key)


def _parse_groups(ck: Checker, raw: Mapping, where: str, app: str | None) -> tuple[LayerGroup, ...]:
    if "groups" in raw:
        key = _groups_key(ck, raw["groups"])
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
        ck.bad(f"{where}.profile", f"unknown layer profile {show(profile)}; use one of {', '.join(sorted(LAYER_PROFILES))}, "
               "or give groups [{forward, backward, params}, ...]")
        return ()
    return layer_profile(profile)


def _parse_freezing(ck: Checker, raw: Any, where: str, app: str | None) -> FreezeSpec | None:
    raw = ck.mapping(raw, where, "freezing")
    groups = _parse_groups(ck, raw, where, app)
    pen = ck.mapping(raw.get("penalty", {}), f"{where}.penalty", "penalty")
    d = FreezePenalty()
    penalty = FreezePenalty(*(ck.field(pen, "penalty", k, f"{where}.penalty", getattr(d, k)) for k in PENALTY_NAMES))
    progress = ck.number(raw, "progress", where, 0.0, minimum=0.0, required=True)
    if progress is not None and progress > 1.0:
        ck.bad(f"{where}.progress", f"is the fraction of training done, in [0, 1]; got {show(progress)}")
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


def check_current_gpus(ck: Checker, jobs: list[JobSpec], cluster: Cluster) -> None:
    """Name each GPU a running job holds that the cluster lacks or another job holds too, and a
    job running on mixed GPU types or on a type it has no throughput parameters for."""
    nodes, index = cluster.nodes, cluster.node_index  # the cluster's own: built once, not each round
    if (cluster.holds_once(job.current_gpus for job in jobs) and len(cluster.gpu_types) == 1
            and all(cluster.nodes[0].gpu_type in job.throughput for job in jobs if job.current_gpus)):
        return  # the common case at once: each GPU exists, held once, all of one type the jobs run on
    holder: dict[tuple[str, int], str] = {}  # by (node, GPU): a GpuRef's own hash is a Python call
    for i, job in enumerate(jobs):
        types = set()
        where = f"jobs[{i}].current_gpus"
        for ref in job.current_gpus:
            node, gpu = ref.node, ref.gpu
            if node not in index:
                ck.bad(where, f"node {show(node)} is not in the cluster")
                continue
            held_on = nodes[index[node]]
            if gpu >= held_on.gpus:
                ck.bad(where, f"GPU {gpu} does not exist on node {show(node)} ({held_on.gpus} GPUs)")
            if (node, gpu) in holder:
                ck.bad(where, f"GPU {node}:{gpu} is also held by job {show(holder[node, gpu])}")
            holder[node, gpu] = job.id
            types.add(held_on.gpu_type)
        if len(types) > 1:
            ck.bad(f"jobs[{i}].current_gpus", f"mixes GPU types {sorted(types)}; a job runs on one type")
        elif types and not types <= set(job.throughput):
            ck.bad(f"jobs[{i}].current_gpus", f"runs on GPU type {show(min(types))}, for which the job has no "
                   f"throughput_params (it has {', '.join(sorted(job.throughput)) or 'none'}); add them")

