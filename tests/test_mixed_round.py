"""A round on a cluster of several GPU types, as a client of one (Sia's simulator) sends it:
per-type batch limits, a type a job has no fitted model for, and a pinned job, in one round."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import jsonschema
import pytest

import schedlab
from schedlab import InputError, parse_round_input, round_input_to_dict, round_result_to_dict, solve_round
from schedlab.formulations import FORMULATIONS
from schedlab.io import round_result_from_dict
from schedlab.models.profiles import shipped_profiles
from schedlab.state import (
    BatchLimits,
    Cluster,
    GpuRef,
    GradStats,
    JobAllocation,
    JobSpec,
    Node,
    RoundInput,
    Settings,
    ThroughputParams,
)
from schedlab.verify import problems

SCHEMAS = Path(schedlab.__file__).parent / "schemas"
PARAMS = {name: asdict(profile.params) for name, profile in shipped_profiles().items()}
SPEED = {"t4": 1.0, "v100": 1.8, "a100": 2.7}
# What each job's parameters are projected for (cluster.gpu_speed, from its fastest fitted type).
PROJECTED = {"fit-t4": {"v100", "a100"}, "fit-t4-v100": {"a100"}, "tight": set(), "pinned": {"v100", "a100"},
             "yolo": set()}
PINNED_GPUS = [{"node": "t0", "gpu": 0}, {"node": "t0", "gpu": 1}]


def mixed_round(formulation: str = "goodput") -> dict:
    """Two 4-GPU T4 nodes, a 4-GPU V100 node and an 8-GPU A100 node; five jobs: two fitted on
    some types only, one with tighter local batches on T4 and A100, a pinned one, a running one."""
    nodes = [{"id": "t0", "gpus": 4, "gpu_type": "t4"}, {"id": "t1", "gpus": 4, "gpu_type": "t4"},
             {"id": "v0", "gpus": 4, "gpu_type": "v100"}, {"id": "a0", "gpus": 8, "gpu_type": "a100"}]
    return {
        "cluster": {"nodes": nodes, "gpu_speed": SPEED},
        "jobs": [
            {"id": "fit-t4", "application": "cifar10", "throughput_params": {"t4": PARAMS["cifar10"]}, "age_s": 3600},
            {"id": "fit-t4-v100", "application": "imagenet",
             "throughput_params": {"t4": PARAMS["imagenet"], "v100": PARAMS["imagenet"]}},
            {"id": "tight", "application": "bert",
             "batch_by_type": {"t4": {"max_local_bsz": 6}, "a100": {"min_local_bsz": 8, "max_local_bsz": 24}}},
            {"id": "pinned", "application": "deepspeech2", "throughput_params": {"t4": PARAMS["deepspeech2"]},
             "current_gpus": PINNED_GPUS, "pinned": True, "age_s": 10},
            {"id": "yolo", "application": "yolov3", "current_gpus": [{"node": "v0", "gpu": 0}], "age_s": 5000},
        ],
        "settings": {"formulation": formulation, "p": -0.5},
    }


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


def _gpu_type(ri: RoundInput, gpu: GpuRef) -> str:
    return ri.cluster.nodes[ri.cluster.node_index[gpu.node]].gpu_type


def _check_mixed_answer(ri: RoundInput, allocations: tuple[JobAllocation, ...]) -> None:
    """What a mixed round's answer must show: the pinned job on its GPUs, one type per job, the
    local batch within the job's bounds on that type, the projected flag exactly where the
    job's parameters on its type were projected."""
    assert problems(ri, allocations) == []
    jobs = {job.id: job for job in ri.jobs}
    pinned = next(a for a in allocations if a.job_id == "pinned")
    assert [{"node": g.node, "gpu": g.gpu} for g in pinned.gpus] == PINNED_GPUS
    for a in allocations:
        types = {_gpu_type(ri, g) for g in a.gpus}
        assert len(types) <= 1
        if types:
            (gpu_type,) = types
            limits = jobs[a.job_id].batch_on(gpu_type)
            assert limits.min_local_bsz <= a.local_bsz <= limits.max_local_bsz
            assert a.projected == (gpu_type in PROJECTED[a.job_id]), a
        else:
            assert not a.projected
    # this round is built so that a job runs on a projected type (T4 is the only type fit-t4
    # was fitted on, and its fair share lies on the A100s)
    assert any(a.projected for a in allocations)


@pytest.mark.parametrize("formulation", ["goodput", "joint"])
def test_a_mixed_round_with_batch_limits_by_type_a_projected_type_and_a_pinned_job(formulation):
    raw = mixed_round(formulation)
    result = solve_round(raw)
    assert result.status == "optimal" and result.verified
    ri = parse_round_input(raw)
    _check_mixed_answer(ri, result.allocations)


def test_the_mixed_round_through_json_and_from_python_gives_the_same_verified_answer():
    raw = mixed_round()
    ri = parse_round_input(raw)
    assert {job.id: set(job.projected_types) for job in ri.jobs} == PROJECTED
    assert parse_round_input(round_input_to_dict(ri)) == ri  # projections survive the trip through JSON
    jsonschema.validate(round_input_to_dict(ri), _schema("round_input.schema.json"))

    from_json = solve_round(json.loads(json.dumps(raw)))
    # the same round built in Python, its projection left to the parser as the JSON's is
    fitted = {job.id: {t: p for t, p in job.throughput.items() if t not in job.projected_types} for job in ri.jobs}
    python_round = replace(ri, jobs=tuple(replace(job, throughput=fitted[job.id], projected_types=())
                                          for job in ri.jobs))
    from_python = solve_round(python_round)
    assert from_python.objective == pytest.approx(from_json.objective, rel=1e-9)
    assert from_python.allocations == from_json.allocations
    out = round_result_to_dict(from_json)
    jsonschema.validate(out, _schema("round_result.schema.json"))
    assert [a["projected"] for a in out["allocations"]] == [a.projected for a in from_json.allocations]
    assert round_result_from_dict(json.loads(json.dumps(out))).allocations == from_json.allocations


def test_schedlab_solve_answers_the_shipped_mixed_round_from_its_file():
    path = Path(__file__).parents[1] / "examples" / "round-mixed.json"
    assert json.loads(path.read_text()) == mixed_round()  # the example is this round
    out = subprocess.run([sys.executable, "-m", "schedlab.cli", "solve", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    jsonschema.validate(result, _schema("round_result.schema.json"))
    assert result["status"] == "optimal"
    _check_mixed_answer(parse_round_input(mixed_round()), round_result_from_dict(result).allocations)


def test_a_result_written_before_the_projected_flag_reads_back_unprojected():
    out = round_result_to_dict(solve_round(mixed_round()))
    for a in out["allocations"]:
        del a["projected"]
    assert not any(a.projected for a in round_result_from_dict(out).allocations)


@pytest.mark.parametrize("formulation", ["goodput", "joint"])
def test_the_greedy_fallback_keeps_the_pinned_job_and_honours_the_types(formulation):
    ri = parse_round_input(mixed_round(formulation))
    model = FORMULATIONS[formulation](ri)
    _check_mixed_answer(ri, model.decode(model.fallback()))


@pytest.mark.parametrize("formulation", ["goodput", "joint"])
def test_the_pyomo_twin_fixes_the_pinned_job_as_the_arrays_do(formulation):
    raw = mixed_round(formulation)
    arrays = solve_round(raw, solver="highs")
    twin = solve_round(raw, solver="appsi_highs")
    assert twin.status == "optimal"
    assert twin.objective == pytest.approx(arrays.objective, rel=1e-6)
    _check_mixed_answer(parse_round_input(raw), twin.allocations)
    held = solve_round(_held_node_round(True, formulation), solver="appsi_highs")
    assert held.status == "optimal"  # not the greedy's answer after verify refused the solver's
    assert held.allocation("old").gpus == (GpuRef("n0", 0), GpuRef("n0", 1))


def _one_job_round(pinned: bool, formulation: str = "goodput") -> dict:
    """One 4-GPU node; a young job on one GPU that the solver would move to all four."""
    return {"cluster": {"nodes": [{"id": "n0", "gpus": 4}]},
            "jobs": [{"id": "a", "application": "cifar10", "current_gpus": [{"node": "n0", "gpu": 3}],
                      "age_s": 3600, "pinned": pinned},
                     {"id": "b", "application": "imagenet", "age_s": 0}],
            "settings": {"formulation": formulation}}


@pytest.mark.parametrize("formulation", ["goodput", "joint"])
def test_a_pinned_job_stays_where_the_unpinned_one_would_move(formulation):
    free = solve_round(_one_job_round(False, formulation)).allocation("a")
    assert free.gpus != (GpuRef("n0", 3),)  # otherwise pinning shows nothing
    kept = solve_round(_one_job_round(True, formulation))
    assert kept.status == "optimal"
    assert kept.allocation("a").gpus == (GpuRef("n0", 3),)
    assert not kept.allocation("a").restarted


def _held_node_round(pinned: bool, formulation: str) -> dict:
    """A job that cannot move (restarted too often) holds a 2-GPU node; unpinned, the round is
    worth more with it out and a new job on both GPUs."""
    return {"cluster": {"nodes": [{"id": "n0", "gpus": 2}]},
            "jobs": [{"id": "old", "application": "yolov3",
                      "current_gpus": [{"node": "n0", "gpu": 0}, {"node": "n0", "gpu": 1}],
                      "age_s": 1, "num_restarts": 5, "pinned": pinned},
                     {"id": "new", "application": "cifar10"}],
            "settings": {"formulation": formulation}}


@pytest.mark.parametrize("formulation", ["goodput", "joint"])
def test_a_pinned_job_is_never_left_unallocated(formulation):
    assert solve_round(_held_node_round(False, formulation)).allocation("old").gpus == ()
    result = solve_round(_held_node_round(True, formulation))
    assert result.status == "optimal"
    assert result.allocation("old").gpus == (GpuRef("n0", 0), GpuRef("n0", 1))
    assert result.allocation("new").gpus == ()


def _batch_round(batch_by_type: dict | None) -> dict:
    """One job that runs the same on a 4-GPU T4 node and a 2-GPU A100 node (no speed ratio:
    fitted on both), unless its T4 micro-batch is bounded."""
    job = {"id": "a", "application": "cifar10", "max_gpus": 4}
    if batch_by_type is not None:
        job["batch_by_type"] = batch_by_type
    return {"cluster": {"nodes": [{"id": "t0", "gpus": 4, "gpu_type": "t4"}, {"id": "a0", "gpus": 2, "gpu_type": "a100"}]},
            "jobs": [job]}


def test_batch_limits_by_type_change_the_answer():
    free = solve_round(_batch_round(None)).allocation("a")
    assert {g.node for g in free.gpus} == {"t0"}  # four T4s beat two A100s of the same speed
    assert free.local_bsz > 16
    bounded = solve_round(_batch_round({"t4": {"min_local_bsz": 16, "max_local_bsz": 16}}))
    assert bounded.status == "optimal"
    a = bounded.allocation("a")
    assert {g.node for g in a.gpus} == {"a0"}  # a micro-batch of 16 makes the T4s worth less
    assert a.local_bsz > 16  # the A100s keep the job's own range


def test_a_type_without_a_speed_is_not_projected_and_the_job_does_not_run_there():
    raw = mixed_round()
    raw["cluster"]["gpu_speed"] = {"t4": 1.0, "v100": 1.8}  # no A100 speed
    ri = parse_round_input(raw)
    assert {job.id: set(job.projected_types) for job in ri.jobs} == {**PROJECTED, "fit-t4": {"v100"},
                                                                     "fit-t4-v100": set(), "pinned": {"v100"}}
    del raw["cluster"]["gpu_speed"]  # today's rule: no projection, a job runs on its fitted types only
    ri = parse_round_input(raw)
    assert all(not job.projected_types for job in ri.jobs)
    result = solve_round(raw)
    assert problems(ri, result.allocations) == []
    fitted = {job.id: set(job.throughput) for job in ri.jobs}
    assert fitted["fit-t4"] == {"t4"} and fitted["fit-t4-v100"] == {"t4", "v100"}
    for a in result.allocations:
        assert not a.projected
        assert {_gpu_type(ri, g) for g in a.gpus} <= fitted[a.job_id]


def test_a_speed_table_may_name_types_the_cluster_lacks_and_project_from_them():
    raw = mixed_round()
    raw["cluster"]["gpu_speed"] = {**SPEED, "h100": 5.4}
    raw["jobs"][0]["throughput_params"] = {"h100": PARAMS["cifar10"]}  # fitted elsewhere, on a faster type
    job = parse_round_input(raw).jobs[0]
    assert job.projected_types == ("a100", "t4", "v100")
    assert job.throughput["a100"].alpha_c == pytest.approx(PARAMS["cifar10"]["alpha_c"] * 2)


def test_a_projection_scales_compute_from_the_fastest_fitted_type_and_keeps_sync():
    slow = ThroughputParams(0.2, 0.02, 0.3, 0.01, 0.1, 0.001, 1.5)
    fast = ThroughputParams(0.1, 0.01, 0.4, 0.02, 0.2, 0.002, 1.5)
    cluster = Cluster((Node("t", 4, "t4"), Node("v", 4, "v100"), Node("a", 4, "a100")), gpu_speed=SPEED)
    projected = cluster.projections({"t4": slow, "v100": fast})
    assert list(projected) == ["a100"]
    ratio = SPEED["a100"] / SPEED["v100"]  # from the faster fitted type, V100
    assert projected["a100"] == replace(fast, alpha_c=fast.alpha_c / ratio, beta_c=fast.beta_c / ratio)
    assert Cluster(cluster.nodes).projections({"t4": slow}) == {}


def test_single_type_rounds_carry_no_new_field_and_answer_as_before():
    raw = {"cluster": {"nodes": [{"id": "n0", "gpus": 4}, {"id": "n1", "gpus": 4}]},
           "jobs": [{"id": "a", "application": "cifar10", "current_gpus": [{"node": "n0", "gpu": 0}], "age_s": 900},
                    {"id": "b", "application": "bert"}]}
    ri = parse_round_input(raw)
    d = round_input_to_dict(ri)
    assert "gpu_speed" not in d["cluster"]
    assert not {"batch_by_type", "pinned", "projected_types"} & {k for job in d["jobs"] for k in job}
    # the docstring's example of solve_round, unchanged
    assert [(a.job_id, a.num_gpus, a.total_bsz) for a in solve_round(raw).allocations] == [("a", 4, 140), ("b", 4, 48)]


def _bad(raw: dict) -> list[str]:
    with pytest.raises(InputError) as exc:
        parse_round_input(raw)
    return exc.value.problems


def _with_job(**fields) -> dict:
    raw = mixed_round()
    raw["jobs"][2].update(fields)
    return raw


@pytest.mark.parametrize(("fields", "message"), [
    ({"batch_by_type": {"h100": {"max_local_bsz": 8}}},
     "jobs[2].batch_by_type: unknown GPU type 'h100'; the cluster's nodes have a100, t4, v100"),
    ({"batch_by_type": {"t4": {"min_local_bsz": 8, "max_local_bsz": 6}}},
     "jobs[2].batch_by_type.t4: min_local_bsz 8 is above max_local_bsz 6 on this GPU type; lower min_local_bsz or "
     "raise max_local_bsz"),
    ({"batch_by_type": {"t4": {"min_local_bsz": 400, "max_local_bsz": 500}}},
     "jobs[2].batch_by_type.t4: min_local_bsz 400 is above max_bsz 384: no GPU count of this type can run it; "
     "lower min_local_bsz"),
    ({"batch_by_type": {"t4": {"max_bsz": 100}}},
     "jobs[2].batch_by_type.t4.max_bsz: is 100, not batch.max_bsz (384); only min_local_bsz and max_local_bsz vary "
     "by GPU type: leave it out"),
    ({"batch_by_type": {"t4": {"max_local_bsz": 0}}}, "jobs[2].batch_by_type.t4.max_local_bsz: must be >= 1, got 0"),
    ({"batch_by_type": {"t4": {"max_local": 8}}},
     "jobs[2].batch_by_type.t4.max_local: unknown key; did you mean 'max_local_bsz'? "),
    ({"pinned": True},
     "jobs[2].pinned: the job holds no GPUs (current_gpus is empty); a pinned job keeps the GPUs it holds: give its "
     "current_gpus, or leave pinned out"),
    ({"pinned": "yes"}, "jobs[2].pinned: must be true or false, got 'yes'"),
    ({"pinned": True, "current_gpus": [{"node": "t1", "gpu": 0}], "min_gpus": 2},
     "jobs[2].pinned: the job holds 1 GPUs, outside its [min_gpus, max_gpus] = [2, 20], and a pinned job stays on "
     "them: widen its GPU limits"),
    ({"throughput_params": {"t4": PARAMS["bert"]}, "projected_types": ["k80"]},
     "jobs[2].projected_types[0]: 'k80' is not a GPU type the job has throughput_params for (a100, t4, v100)"),
])
def test_bad_mixed_fields_are_named_with_their_fix(fields, message):
    found = _bad(_with_job(**fields))
    assert any(p.startswith(message) for p in found), found


@pytest.mark.parametrize(("speed", "message"), [
    ({"t4": 0}, "cluster.gpu_speed.t4: must be > 0, got 0"),
    ({"t4": "fast"}, "cluster.gpu_speed.t4: must be a number, got 'fast'"),
])
def test_bad_gpu_speeds_are_named(speed, message):
    raw = mixed_round()
    raw["cluster"]["gpu_speed"] = speed
    assert message in _bad(raw)


def test_the_python_path_names_the_same_fields():
    ri = parse_round_input(mixed_round())
    tight = ri.jobs[2]
    bad = replace(tight, batch_by_type={"t4": replace(tight.batch, min_local_bsz=8, max_local_bsz=6)})
    found = _bad_round(replace(ri, jobs=ri.jobs[:2] + (bad,) + ri.jobs[3:]))
    assert any(p.startswith("jobs[2].batch_by_type.t4: min_local_bsz 8 is above max_local_bsz 6") for p in found)
    unheld = replace(ri.jobs[3], current_gpus=())
    found = _bad_round(replace(ri, jobs=ri.jobs[:3] + (unheld,) + ri.jobs[4:]))
    assert any(p.startswith("jobs[3].pinned: the job holds no GPUs") for p in found)


def _bad_round(ri: RoundInput) -> list[str]:
    with pytest.raises(InputError) as exc:
        solve_round(ri)
    return exc.value.problems


def _two_type_round() -> RoundInput:
    params = ThroughputParams(0.1, 0.01, 0.2, 0.01, 0.05, 0.001, 1.0)
    job = JobSpec("a", {"t4": params, "a100": params}, GradStats(1.0, 1.0), BatchLimits(32, 1024, 8, 64), max_gpus=4,
                  batch_by_type={"t4": BatchLimits(32, 1024, 8, 16)})
    pinned = replace(job, id="p", current_gpus=(GpuRef("a", 0),), pinned=True, age_s=100.0)
    return RoundInput(Cluster((Node("t", 2, "t4"), Node("a", 2, "a100"))), (job, pinned), Settings())


def test_verify_refuses_an_allocation_that_mixes_gpu_types():
    ri = _two_type_round()
    mixed = (JobAllocation("a", (GpuRef("a", 1), GpuRef("t", 0)), 32, 16, 0),
             JobAllocation("p", (GpuRef("a", 0),), 16, 16, 0))
    assert problems(ri, mixed) == ["job 'a' mixes GPU types ['a100', 't4'] in one allocation; a job's GPUs are of one type"]


def test_verify_holds_the_local_batch_to_its_type_and_the_pinned_job_to_its_gpus():
    ri = _two_type_round()
    allocations = (JobAllocation("a", (GpuRef("t", 0), GpuRef("t", 1)), 64, 32, 0),  # 32 fits A100's 64, not T4's 16
                   JobAllocation("p", (GpuRef("a", 1),), 16, 16, 0))
    assert problems(ri, allocations) == ["job 'a': local batch 32 outside [8, 16] on t4",
                                         "job 'p' is pinned to its current GPUs, but was given ['a/1']"]
    on_a100 = (replace(allocations[0], gpus=(GpuRef("a", 1),), total_bsz=32), JobAllocation("p"))
    assert problems(ri, on_a100) == ["job 'p' is pinned to its current GPUs, but was given none"]


def test_verify_names_a_gpu_that_does_not_exist_and_one_given_twice():
    ri = _two_type_round()
    fine = (JobAllocation("a", (GpuRef("a", 1),), 32, 32, 0), JobAllocation("p", (GpuRef("a", 0),), 16, 16, 0))
    assert problems(ri, fine) == []
    twice = (replace(fine[0], gpus=(GpuRef("a", 0),)), fine[1])
    assert problems(ri, twice) == ["GPU a:0 given to 'a' and 'p'"]
    missing = (replace(fine[0], gpus=(GpuRef("a", 2),)), fine[1])
    assert problems(ri, missing) == ["job 'a' holds GPU a:2, which does not exist"]
    unknown = fine + (JobAllocation("x", (GpuRef("a", 1),), 32, 32, 0),)  # its GPUs are not counted
    assert problems(ri, unknown) == ["allocation for unknown job 'x'"]


@pytest.mark.parametrize("formulation", ["goodput", "joint"])
def test_a_pinned_job_that_cannot_run_on_its_gpus_is_refused_by_name(formulation):
    raw = mixed_round(formulation)
    # two T4s at a micro-batch of at least 200 exceed its total batch limit of 384
    raw["jobs"][3].update(application="bert", throughput_params={"t4": PARAMS["bert"]},
                          batch_by_type={"t4": {"min_local_bsz": 200, "max_local_bsz": 300}})
    with pytest.raises(InputError) as exc:
        solve_round(raw)
    assert exc.value.problems == ["jobs[3].pinned: job 'pinned' cannot run on the GPUs it holds (no goodput within its "
                                  "batch limits on them, or over its freezing budget); unpin it or change its limits"]
