"""The JSON form of schedlab's dataclasses: a round, a result (and a result back from its JSON),
an error, and JSON text as every schedlab output writes it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from schedlab.errors import InputError, SchedlabError
from schedlab.state import Cluster, FreezeSpec, GpuRef, JobAllocation, RoundInput, RoundResult, Status

__all__ = ["cluster_to_dict", "error_to_dict", "json_text", "round_input_to_dict", "round_result_from_dict",
           "round_result_to_dict"]


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
        if job.batch_by_type:
            d["batch_by_type"] = {t: {"min_local_bsz": b.min_local_bsz, "max_local_bsz": b.max_local_bsz}
                                  for t, b in job.batch_by_type.items()}
        if job.pinned:
            d["pinned"] = True
        if job.projected_types:
            d["projected_types"] = list(job.projected_types)
        jobs.append(d)
    settings = _fields(ri.settings)
    if ri.settings.max_min:
        settings["p"] = "-inf"
    options = settings.pop("solver_options")
    if options:
        settings["solver_options"] = dict(options)
    return {"cluster": cluster_to_dict(ri.cluster), "jobs": jobs, "settings": settings, "round_s": ri.round_s}


def cluster_to_dict(cluster: Cluster) -> dict[str, Any]:
    """The JSON form of a Cluster (a round's `cluster`)."""
    nodes = []
    for n in cluster.nodes:
        d: dict[str, Any] = {"id": n.id, "gpus": n.gpus, "gpu_type": n.gpu_type}
        if n.slowdown:
            d["slowdown"] = {c: list(f) for c, f in n.slowdown.items()}
        nodes.append(d)
    out: dict[str, Any] = {"nodes": nodes}
    if cluster.gpu_speed:
        out["gpu_speed"] = dict(cluster.gpu_speed)
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
    (null objective, bound or gap as NaN, NaN and infinity; an allocation without `projected`,
    as written before it existed, not projected)."""
    allocations = tuple(JobAllocation(
        a["job_id"], tuple(GpuRef(g["node"], g["gpu"]) for g in a["gpus"]), a["total_bsz"], a["local_bsz"],
        a["accum_steps"], a["goodput"], a["speedup"], a["restarted"], a["frozen_groups"], a["freeze_penalty"],
        a.get("projected", False))
        for a in raw["allocations"])
    number = lambda key, missing: missing if raw[key] is None else raw[key]  # noqa: E731
    return RoundResult(allocations, Status(raw["status"]), raw["solver"], number("objective", math.nan),
                       number("bound", math.nan), number("gap", math.inf), raw["build_s"], raw["solve_s"],
                       raw["verified"], raw["message"], raw["options_s"], raw["bound_timed_out"])


def round_result_to_dict(res: RoundResult) -> dict[str, Any]:
    """The JSON form of a RoundResult (schemas/round_result.schema.json): a non-finite objective, bound
    or gap as null."""
    allocations = []
    for a in res.allocations:
        allocations.append({
            "job_id": a.job_id, "gpus": [_fields(g) for g in a.gpus], "num_gpus": a.num_gpus,
            "num_nodes": a.num_nodes, "total_bsz": a.total_bsz, "local_bsz": a.local_bsz,
            "accum_steps": a.accum_steps, "goodput": a.goodput, "speedup": a.speedup, "restarted": a.restarted,
            "frozen_groups": a.frozen_groups, "freeze_penalty": a.freeze_penalty, "projected": a.projected,
        })
    return {
        "status": res.status, "solver": res.solver, "objective": _nulls(res.objective),
        "bound": _nulls(res.bound), "gap": _nulls(res.gap), "build_s": res.build_s,
        "options_s": res.options_s, "solve_s": res.solve_s, "verified": res.verified, "message": res.message,
        "bound_timed_out": res.bound_timed_out, "allocations": allocations,
    }
