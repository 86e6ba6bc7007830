"""solve_round() and the CLI as their users meet them: JSON in, verified JSON out, clear errors."""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import subprocess
import sys
from pathlib import Path

import jsonschema
import numpy as np
import pytest
from conftest import needs_pyomo_solver

import schedlab
from schedlab import (
    InputError,
    build_model,
    parse_round_input,
    round_input_to_dict,
    round_result_to_dict,
    solve_round,
)
from schedlab.bench import random_round
from schedlab.formulations import FORMULATIONS
from schedlab.milp import FAILED, SolveOutcome
from schedlab.solvers.highs_direct import lp_bound
from schedlab.solvers.registry import SOLVERS
from schedlab.state import Settings

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "round-16x4.json"
SCHEMAS = Path(schedlab.__file__).parent / "schemas"


def _example() -> dict:
    return json.loads(EXAMPLE.read_text())


def _schema(name: str) -> dict:
    return json.loads((SCHEMAS / name).read_text())


def test_example_round_solves_optimally_and_uses_the_cluster():
    res = solve_round(_example())
    assert res.status == "optimal" and res.verified
    assert sum(a.num_gpus for a in res.allocations) == 64
    running = {j["id"] for j in _example()["jobs"] if j.get("current_gpus")}
    assert running  # the example exercises restarts
    for a in res.allocations:
        if a.gpus:
            assert a.total_bsz == a.num_gpus * a.local_bsz * (a.accum_steps + 1)
            assert a.goodput > 0


def test_solve_round_leaves_the_garbage_collector_as_it_found_it(monkeypatch):
    """The collector is off during a round (its objects live until it ends), then as the caller
    had it: on again, or still off; also when the round's input is refused."""
    seen = []
    with monkeypatch.context() as m:
        m.setattr(schedlab.api, "_solve_validated", lambda *a, **k: seen.append(gc.isenabled()))
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            solve_round(_example())
            assert gc.isenabled() is enabled and seen.pop() is False
    gc.enable()
    with pytest.raises(schedlab.InputError):
        solve_round({"jobs": []})
    assert gc.isenabled()


def test_a_pass_the_caller_made_due_runs_outside_the_round():
    """A collector pass that the caller's allocations made due (more new objects than the
    collector's threshold) waits for the caller's next allocation: none runs while the round is
    solved, at its first allocation or its last."""
    ri = _example()
    passes = []

    def count(phase, info):
        if phase == "start":
            passes.append(info["generation"])

    gc.collect()
    gc.callbacks.append(count)
    try:
        for _ in range(5):
            gc.disable()
            debt = [[] for _ in range(gc.get_threshold()[0] + 1)]  # tracked objects: a pass is due
            gc.enable()
            passes.clear()
            solve_round(ri)
            assert not passes  # (no allocation before the check: it would run the pass)
            del debt
    finally:
        gc.callbacks.remove(count)


@pytest.mark.parametrize("p", [-1.0, 0.0])
def test_a_round_leaves_no_cycle_for_the_garbage_collector(p):
    """What a round made goes when the round and its answer do, solver instances and the
    cluster's checked mark included: nothing waits for the collector's next pass, which would
    pay to destroy it (a scheduler that builds its Cluster anew each round makes one a round);
    nor does the LP bound an unproven answer gets (lp_bound). (A round raced against CP-SAT leaves
    OR-Tools' CpModel, which refers to itself.)"""
    rng = np.random.default_rng(5)
    solve_round(random_round(rng, 32, 24, settings=Settings(p=p)))
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            ri = random_round(rng, 32, 24, settings=Settings(p=p))
            result = solve_round(ri)
            assert result.status == "optimal"
            lp_bound(FORMULATIONS["goodput"](ri).arrays())
            del ri, result
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_published_schemas_accept_the_example_and_its_result():
    jsonschema.validate(_example(), _schema("round_input.schema.json"))
    jsonschema.validate(round_result_to_dict(solve_round(_example())), _schema("round_result.schema.json"))


def test_dataclass_and_json_inputs_give_the_same_answer():
    ri = random_round(np.random.default_rng(5), 32, 12)
    assert parse_round_input(round_input_to_dict(ri)) == ri
    a, b = solve_round(ri), solve_round(round_input_to_dict(ri))
    assert a.allocations == b.allocations and a.objective == pytest.approx(b.objective)


def test_a_round_input_with_bad_values_gets_the_error_its_json_gets():
    ri = parse_round_input(_example())
    job = ri.jobs[3]
    bad = dataclasses.replace(ri, jobs=(*ri.jobs[:3], dataclasses.replace(job, batch=dataclasses.replace(
        job.batch, max_local_bsz=-4)), *ri.jobs[4:]), settings=dataclasses.replace(ri.settings, time_limit_s=0.0))
    with pytest.raises(InputError) as as_data:
        solve_round(bad)
    with pytest.raises(InputError) as as_json:
        solve_round(round_input_to_dict(bad))
    assert str(as_data.value) == str(as_json.value)
    assert as_data.value.problems[0].startswith("jobs[3].batch.max_local_bsz: must be >= 1, got -4")
    assert as_data.value.problems[-1] == "settings.time_limit_s: must be > 0, got 0.0"


def test_jobs_sharing_parameters_are_each_named_for_a_bad_one():
    ri = random_round(np.random.default_rng(5), 32, 4)
    good = dataclasses.replace(ri.jobs[0].throughput["default"], gamma=1.0)
    bad = dataclasses.replace(good, gamma=0.5)
    as_bool = dataclasses.replace(good, gamma=True)  # equal to the valid 1.0, and not a number
    jobs = tuple(dataclasses.replace(job, throughput={"default": params}, current_gpus=())
                 for job, params in zip(ri.jobs, (good, bad, bad, as_bool)))
    with pytest.raises(InputError) as err:
        parse_round_input(dataclasses.replace(ri, jobs=jobs))
    assert [p.split(":")[0] for p in err.value.problems] == [
        f"jobs[{i}].throughput_params.default.gamma" for i in (1, 2, 3)]


def test_a_round_input_is_checked_without_being_turned_into_json(monkeypatch):
    def refuse(*args):
        raise AssertionError("a RoundInput was turned into JSON to be checked")

    ri = parse_round_input(_example())
    for name in ("schedlab.io.round_input_to_dict", "schedlab.io.encode.round_input_to_dict",
                 "schedlab.io.encode.cluster_to_dict"):
        monkeypatch.setattr(name, refuse)
    assert solve_round(ri).verified
    assert build_model(ri, formulation="goodput") is not None
    with pytest.raises(InputError, match="settings.time_limit_s: must be > 0"):  # overrides too
        solve_round(ri, time_limit_s=-1)


def test_inline_profile_for_an_embedding_schedulers_own_model():
    params = {"alpha_c": 0.05, "beta_c": 0.001, "alpha_n": 0.2, "beta_n": 0.01, "alpha_r": 0.05,
              "beta_r": 0.005, "gamma": 1.5}
    raw = {"cluster": {"nodes": [{"id": "a", "gpus": 8, "gpu_type": "a100"}]},
           "jobs": [{"id": "llm", "throughput_params": {"a100": params}, "grad_stats": {"sqr": 1.0, "var": 50.0},
                     "batch": {"init_bsz": 32, "max_bsz": 1024, "min_local_bsz": 8, "max_local_bsz": 64}}]}
    res = solve_round(raw)
    assert res.status == "optimal"
    assert res.allocation("llm").num_gpus == 8


BAD_INPUTS = [
    (lambda d: d["jobs"][0].update(application="resnet9000"), "jobs[0].application: unknown application 'resnet9000'"),
    (lambda d: d["jobs"][1].update(min_gpus=-2), "jobs[1].min_gpus: must be >= 0"),
    (lambda d: d["jobs"][1].update(max_gpus=2.5), "jobs[1].max_gpus: must be a whole number"),
    (lambda d: d["jobs"][2].update(age_s=float("nan")), "jobs[2].age_s: must be a finite number"),
    (lambda d: d["jobs"][3].update(id=d["jobs"][0]["id"]), "jobs[3].id: duplicate id"),
    (lambda d: d["jobs"][4].update(min_gpus=65), "jobs[4].min_gpus: 65 exceeds the cluster's 64 GPUs"),
    (lambda d: d["jobs"][4].update(min_gpus=4, max_gpus=2), "jobs[4].max_gpus: 2 is below min_gpus 4"),
    (lambda d: d["cluster"]["nodes"][0].update(gpus=-1), "cluster.nodes[0].gpus: must be >= 0"),
    (lambda d: d["jobs"][5].update(current_gpus=[{"node": "nowhere", "gpu": 0}]), "node 'nowhere' is not in the cluster"),
    (lambda d: d["jobs"][5].update(current_gpus=[{"node": "n0", "gpu": 9}]), "GPU 9 does not exist on node 'n0'"),
    (lambda d: d["jobs"][5].update(current_gpus=[{"node": "n0", "gpu": 0}, {"node": "n0", "gpu": 0}]),
     "GPU n0:0 is also held by job"),
    (lambda d: d["settings"].update(p="fair"), "settings.p: must be a number or \"-inf\""),
    (lambda d: d["settings"].update(time_limit_s=0), "settings.time_limit_s: must be > 0"),
    (lambda d: d.update(extra=1), "extra: unknown key"),
    (lambda d: d["jobs"].append({"id": "x"}), "jobs[40]: needs an application name"),
]


@pytest.mark.parametrize("mutate, message", BAD_INPUTS)
def test_each_bad_input_gets_one_clear_error(mutate, message):
    raw = _example()
    mutate(raw)
    with pytest.raises(InputError) as err:
        solve_round(raw)
    assert any(message in p for p in err.value.problems), err.value.problems


def test_a_gpu_held_by_two_jobs_is_reported_with_both():
    raw = _example()
    holder = next(j for j in raw["jobs"] if j.get("current_gpus"))
    other = next(j for j in raw["jobs"] if not j.get("current_gpus"))
    other["current_gpus"] = [holder["current_gpus"][0]]
    with pytest.raises(InputError, match=f"also held by job '{holder['id']}'"):
        solve_round(raw)


def test_all_problems_are_reported_at_once():
    raw = _example()
    raw["jobs"][0]["min_gpus"] = -1
    raw["jobs"][1]["application"] = "nope"
    with pytest.raises(InputError) as err:
        solve_round(raw)
    assert len(err.value.problems) == 2


@pytest.mark.parametrize("failure", ["no point", "crash"])
def test_solver_failure_yields_a_verified_fallback(monkeypatch, failure):
    def broken(opts, settings):
        if failure == "crash":
            raise MemoryError("solver ran out of memory")
        return SolveOutcome(FAILED, None, math.nan, math.nan, 0.5, "time limit reached, no solution"), 0.0

    monkeypatch.setitem(SOLVERS, Settings.solver, broken)
    res = solve_round(_example())
    assert res.status == "fallback" and res.verified
    out = round_result_to_dict(res)  # the solver had no bound: the LP relaxation is the bound
    assert out["bound"] >= out["objective"] and out["bound_timed_out"] is False and "LP relaxation" in out["message"]
    running = {j["id"]: j["current_gpus"] for j in _example()["jobs"] if j.get("current_gpus")}
    for job_id, gpus in running.items():  # the fallback keeps running jobs in place
        assert [(g.node, g.gpu) for g in res.allocation(job_id).gpus] == sorted((g["node"], g["gpu"]) for g in gpus)
    assert sum(a.num_gpus for a in res.allocations) > sum(map(len, running.values()))


def test_time_limited_solve_still_returns_a_verified_answer():
    ri = random_round(np.random.default_rng(11), 512, 300)
    res = solve_round(ri, time_limit_s=0.001)
    assert res.verified and res.status in {"optimal", "time_limit", "fallback"}


def test_solvers_agree_on_the_example():
    objectives = {s: solve_round(_example(), solver=s).objective for s in ("highs", "cpsat", "appsi_highs")}
    assert objectives["cpsat"] == pytest.approx(objectives["highs"], rel=1e-5)
    assert objectives["appsi_highs"] == pytest.approx(objectives["highs"], rel=1e-6)


def _cli(*args, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "schedlab.cli", *args], input=stdin, capture_output=True, text=True)


def test_cli_solve_writes_result_json():
    out = _cli("solve", str(EXAMPLE), "--solver", "cpsat", "--time-limit", "20")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    jsonschema.validate(result, _schema("round_result.schema.json"))
    assert result["solver"] == "cpsat"


def test_cli_rejects_malformed_json_without_traceback(tmp_path):
    bad = tmp_path / "round.json"
    bad.write_text('{"cluster": {"nodes": [}')
    out = _cli("solve", str(bad))
    assert out.returncode == 2
    assert "not valid JSON" in out.stderr and "line 1" in out.stderr
    assert "Traceback" not in out.stderr


def test_cli_reports_invalid_fields_without_traceback():
    raw = _example()
    raw["jobs"][0]["application"] = "resnet9000"
    out = _cli("solve", "-", stdin=json.dumps(raw))
    assert out.returncode == 2
    assert "jobs[0].application" in out.stderr and "Traceback" not in out.stderr


def test_cli_bench_prints_the_documented_keys():
    out = _cli("bench", "--gpus", "16", "--jobs", "10", "--rounds", "2", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    for key in ("build_p50_ms", "solve_p50_ms", "total_p50_ms", "total_p95_ms", "gap_max", "status_counts"):
        assert key in summary
    assert summary["status_counts"] == {"optimal": 2}
    assert summary["lp_alone_p50_ms"] > 0  # the gap to the floor, beside the latency
    assert summary["total_over_lp"] == pytest.approx(summary["total_p50_ms"] / summary["lp_alone_p50_ms"])


def test_bench_solves_at_the_mip_gap_asked_and_reports_the_loss_against_the_lp_bound(monkeypatch):
    import schedlab.bench.latency as latency

    gaps = []

    def solve(ri):
        gaps.append(ri.settings.mip_gap)
        return schedlab.solve_round(ri)

    monkeypatch.setattr(latency, "solve_round", solve)
    summary = latency.run_bench(16, 10, 2, seed=3, mip_gap=0.02)
    assert gaps == [0.02] * 3 and summary["mip_gap"] == 0.02  # the warm-up round, then the two timed
    # an answer within 2 % of its own bound, and the LP relaxation's bound at least that bound
    assert 0 <= summary["gap_max"] <= 0.02 and summary["gap_vs_lp_max"] >= summary["gap_max"] - 1e-9


def test_cli_bench_scale_prints_a_table_and_one_json_line():
    out = _cli("bench", "--scale", "--max-gpus", "256")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    rows = json.loads(lines[-1])["scale"]
    assert [r["gpus"] for r in rows] == [64, 256] and [r["jobs"] for r in rows] == [32, 128]
    assert len(lines) == 1 + len(rows) + 1  # header, a row per size, the JSON
    for r in rows:
        # the LP bound is up to ~1e-3 above the optimum where jobs are fewer than GPUs
        assert r["partitions"] == 1 and 0 <= r["gap_vs_lp_max"] < 1e-2 and r["peak_mb"] > 0
        assert 0 < r["options_p50_ms"] and 0 < r["build_p50_ms"] and r["options_p50_ms"] + r["build_p50_ms"] < r["total_p50_ms"]
        assert set(r["status_counts"]) == {"optimal"}


def test_cli_solves_a_round_with_variability_and_topology():
    joint = EXAMPLE.parent / "round-joint-16x4.json"
    jsonschema.validate(json.loads(joint.read_text()), _schema("round_input.schema.json"))
    out = _cli("solve", str(joint))
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    jsonschema.validate(result, _schema("round_result.schema.json"))
    assert result["status"] == "optimal" and result["verified"]
    assert sum(a["num_gpus"] for a in result["allocations"]) == 64  # 40 jobs fill the 64 GPUs


def test_unknown_formulation_and_solver_are_named():
    raw = _example()
    raw["settings"] |= {"formulation": "magic", "solver": "/bin/sh"}
    with pytest.raises(InputError) as err:
        solve_round(raw)
    assert any("settings.formulation" in p for p in err.value.problems)
    assert any("settings.solver" in p and "unknown solver" in p for p in err.value.problems)


def test_lp_first_is_a_setting_and_must_be_a_boolean():
    raw = _example()
    raw["settings"]["lp_first"] = "no"
    with pytest.raises(InputError) as err:
        solve_round(raw)
    assert any("settings.lp_first" in p and "true or false" in p for p in err.value.problems)
    raw["settings"]["lp_first"] = False
    full = solve_round(raw)
    assert full.status == "optimal" and "LP" not in full.message
    assert solve_round(_example()).objective == pytest.approx(full.objective, rel=1e-4)


def test_cli_stream_answers_each_line_as_it_comes_and_goes_on_after_a_bad_one():
    round_line = json.dumps(_example()) + "\n"
    proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "solve", "--stream"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdin.write(round_line)
        proc.stdin.flush()
        first = json.loads(proc.stdout.readline())  # answered while stdin is still open: flushed per round
        jsonschema.validate(first, _schema("round_result.schema.json"))
        proc.stdin.write('{"cluster": [}\n\n' + json.dumps({**_example(), "settings": {"time_limit": 5}}) + "\n")
        proc.stdin.write(round_line)
        proc.stdin.close()
        rest = [json.loads(line) for line in proc.stdout]
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr.read()
    assert [r.get("error") for r in rest] == ["invalid_input", "invalid_input", None]  # the blank line is skipped
    assert "line 2: not valid JSON" in rest[0]["problems"][0]
    assert rest[1]["problems"][0].startswith("settings.time_limit: unknown key")
    assert rest[2]["objective"] == pytest.approx(first["objective"])


def test_json_outputs_write_null_for_nan_and_infinity():
    from schedlab.io import json_text

    text = json_text({"mean_jct_s": math.nan, "gaps": [math.inf, 1.5], "nested": {"low": -math.inf}, "n": 3})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in JSON output")) == {
        "mean_jct_s": None, "gaps": [None, 1.5], "nested": {"low": None}, "n": 3}


@pytest.mark.parametrize("name", sorted(__import__("schedlab.policies", fromlist=["POLICIES"]).POLICIES))
def test_every_policy_answers_a_round_another_scheduler_made(name):
    # The service hands a policy whatever round a client sends: jobs already running on GPU
    # counts this policy would not have chosen (fifo kept them even where their batch could not
    # split over them, and failed verification).
    from schedlab.io import parse_round_input
    from schedlab.policies import make_policy

    result = make_policy(name).schedule(parse_round_input(_example()))
    assert result.verified and {a.job_id for a in result.allocations} == {j["id"] for j in _example()["jobs"]}


@pytest.mark.parametrize("args, message", [
    (("bench", "--rounds", "0"), "argument --rounds: must be >= 1, got 0"),
    (("bench", "--gpus", "-5"), "argument --gpus: must be >= 1"),
    (("bench", "--time-limit", "nan", "--rounds", "1"), "settings.time_limit_s: must be a finite number, got nan"),
    (("solve", str(EXAMPLE), "--time-limit", "-1"), "settings.time_limit_s: must be > 0"),
    (("serve", "--port", "70000"), "argument --port: must be in [1, 65535]"),
    (("replay", "--workload", "workload-1", "--policy", "fifo", "--nodes", "x"), "argument --nodes: must be an integer"),
])
def test_cli_flags_are_checked_as_the_json_fields_are(args, message):
    # a flag that is a round field is checked with the round; the others by their own range
    out = _cli(*args)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_pyomo_log_lines_go_to_stderr_not_into_the_json():
    probe = ("import logging, schedlab.solvers.pyomo_backend\n"
             "logging.getLogger('pyomo.opt').error('Solver (glpk) returned non-zero return code (1)')")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.stdout == "" and "ERROR: Solver (glpk)" in out.stderr


@pytest.mark.parametrize("solver, option, stopper", [
    ("highs", {"mip_rel_gap": 0.0}, {"time_limit": 0.0}),
    ("cpsat", {"linearization_level": 2}, {"max_time_in_seconds": 0.0}),
    ("appsi_highs", {"mip_rel_gap": 0.0}, {"time_limit": 0.0}),
    pytest.param("cbc", {"ratio": 0.0}, {"seconds": 0.0}, marks=needs_pyomo_solver("cbc")),
])
def test_solver_options_reach_the_solver_and_win_over_schedlabs(solver, option, stopper):
    best = solve_round(_example(), solver="highs").objective
    assert solve_round(_example(), solver=solver, solver_options=option).objective == pytest.approx(best, rel=1e-5)
    # a time limit of 0 in the solver's own name overrides the round's: nothing is proven
    assert solve_round(_example(), solver=solver, solver_options=stopper).status != "optimal"


@pytest.mark.parametrize("solver, options, field", [
    ("highs", {"no_such_option": 1}, "settings.solver_options.no_such_option"),
    ("highs", {"presolve": "maybe"}, "settings.solver_options.presolve"),
    ("appsi_highs", {"no_such_option": 1}, "settings.solver_options.no_such_option"),
    ("cpsat", {"num_workers": "many"}, "settings.solver_options.num_workers"),
    ("portfolio", {"mip_rel_gap": 0.0}, "settings.solver_options"),
    ("highs", {"bad name": 1}, "settings.solver_options"),
    ("highs", {"huge": 1e300}, "settings.solver_options.huge"),
])
def test_solver_options_a_solver_rejects_are_input_errors_naming_them(solver, options, field):
    with pytest.raises(InputError) as err:
        solve_round(_example(), solver=solver, solver_options=options)
    assert any(p.startswith(field) for p in err.value.problems), err.value.problems


def test_a_solver_that_takes_no_options_is_named_by_its_registry_entry(monkeypatch):
    # the refusal is the entry's declared capability, not a check of the solver's name
    race = dataclasses.replace(SOLVERS["portfolio"], options_refused="race runs three solvers")
    monkeypatch.setitem(SOLVERS, "race", race)
    with pytest.raises(InputError) as err:
        solve_round(_example(), solver="race", solver_options={"mip_rel_gap": 0.0})
    assert err.value.problems == ["settings.solver_options: race runs three solvers: set settings.solver to the one "
                                  "the options are for"]
    assert solve_round(_example(), solver="race").verified


def test_solver_options_survive_the_json_round_trip():
    raw = {**_example(), "settings": {"solver": "highs", "solver_options": {"presolve": "on", "mip_rel_gap": 1e-6}}}
    ri = parse_round_input(raw)
    assert ri.settings.solver_options == (("presolve", "on"), ("mip_rel_gap", 1e-6))
    assert parse_round_input(round_input_to_dict(ri)) == ri
    jsonschema.validate(round_input_to_dict(ri), _schema("round_input.schema.json"))


@pytest.mark.parametrize("solver, log_line", [("highs", "Coefficient ranges"), ("cpsat", "Starting CP-SAT"),
                                              ("appsi_highs", "Coefficient ranges"), ("portfolio", "Coefficient ranges")])
def test_cli_solver_option_and_log_keep_the_json_clean(solver, log_line):
    options = ["--solver-option", "random_seed=3"] if solver != "portfolio" else []
    out = _cli("solve", str(EXAMPLE), "--solver", solver, *options, "--solver-log")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "optimal"
    assert log_line in out.stderr


def test_cli_solver_option_needs_a_name_and_a_value():
    out = _cli("solve", str(EXAMPLE), "--solver", "highs", "--solver-option", "mip_rel_gap")
    assert out.returncode != 0 and "--solver-option mip_rel_gap: give NAME=VALUE" in out.stderr


def test_bench_times_the_same_rounds_after_its_untimed_warm_up(monkeypatch):
    import schedlab.bench.latency as latency

    seen = []

    def solve(ri):
        seen.append(ri.jobs)
        return schedlab.solve_round(ri)

    monkeypatch.setattr(latency, "solve_round", solve)
    cold = latency.run_bench(16, 10, 2, seed=3, warmup=0)
    timed_cold = list(seen)
    seen.clear()
    warm = latency.run_bench(16, 10, 2, seed=3, warmup=2)
    assert (cold["warmup_rounds"], warm["warmup_rounds"], len(seen)) == (0, 2, 4)
    assert seen[2:] == timed_cold  # the timed rounds are seed 3's either way
    assert cold["gap_vs_lp_max"] == warm["gap_vs_lp_max"] and cold["status_counts"] == warm["status_counts"]
