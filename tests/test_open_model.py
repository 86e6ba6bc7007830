"""The model, open: build_model's readable Pyomo model, solve_round(customize=...), --write."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_pyomo_solver

pyo = pytest.importorskip("pyomo.environ")

from schedlab import InputError, build_model, parse_round_input, solve_round  # noqa: E402
from schedlab.formulations.base import CustomizedModel  # noqa: E402
from schedlab.formulations.goodput import goodput_model  # noqa: E402
from schedlab.solvers.highs_direct import solve_highs  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "round-16x4.json"


def _example(apps: tuple[str, ...] | None = None) -> dict:
    raw = json.loads(EXAMPLE.read_text())
    if apps:  # jobs that scale: the round's optimum gives one of them 12 GPUs
        raw["jobs"] = [j for j in raw["jobs"] if j.get("application") in apps]
    return raw


def at_most_8_gpus(m) -> None:
    m.at_most_8 = pyo.Constraint(m.C, rule=lambda m, j, o: m.x[j, o] == 0 if m.gpus[j, o] > 8 else pyo.Constraint.Skip)


def test_build_model_names_every_option_by_job_and_shape():
    raw = _example()
    m = build_model(raw)
    ids = [job["id"] for job in raw["jobs"]]
    assert list(m.J) == [i for i in ids if any(j == i for j, _ in m.C)]
    assert ("yolov3-0", "stay") in m.C and ("bert-4", "g0/2n/8gpu") in m.C
    assert m.gpus["bert-4", "g0/2n/8gpu"] == 8 and m.nodes["bert-4", "g0/2n/8gpu"] == 2
    assert {c.local_name for c in m.component_objects(pyo.Constraint)} == {"one", "level", "slots"}


@pytest.mark.parametrize("solver", ["appsi_highs", pytest.param("cbc", marks=needs_pyomo_solver("cbc")), "highs", "cpsat",
                                    "portfolio"])
def test_a_customized_round_is_the_round_with_those_options_removed(solver):
    """The customization's optimum, by every solver (the array solvers on the changed model's
    compiled arrays), is HiGHS's on the original arrays with every option above 8 GPUs fixed to
    0: an independent route to the same model."""
    raw = _example(("imagenet", "bert"))
    base = solve_round(raw, solver="appsi_highs")
    assert max(len(a.gpus) for a in base.allocations) > 8
    capped = solve_round(raw, solver=solver, customize=at_most_8_gpus)
    assert capped.status == "optimal" and max(len(a.gpus) for a in capped.allocations) <= 8
    model = goodput_model(parse_round_input(raw))
    arrays = model.arrays()
    n = model.opts.num_options
    col_hi = arrays.col_hi.copy()
    col_hi[:n] = np.where(model.opts.num_gpus > 8, 0.0, col_hi[:n])
    expected = solve_highs(replace(arrays, col_hi=col_hi, start=None), 30.0, 0.0)
    assert capped.objective == pytest.approx(expected.objective, rel=1e-6)
    assert capped.objective < base.objective - 1e-3


def test_a_customized_objective_term_is_solved_and_reported():
    def prefer_staying(m):  # one unit of utility for every job that keeps its GPUs
        m.obj.expr = m.obj.expr + sum(m.x[j, o] for j, o in m.C if o == "stay")

    def stays(result) -> int:
        return sum(bool(a.gpus) and not a.restarted for a in result.allocations if a.job_id in running)

    raw = _example()
    running = {j["id"] for j in raw["jobs"] if j.get("current_gpus")}
    plain = solve_round(raw, solver="appsi_highs")
    bonus = solve_round(raw, solver="appsi_highs", customize=prefer_staying)
    assert bonus.status == "optimal"
    assert bonus.objective >= plain.objective + stays(plain) - 1e-6  # plain's answer is a point of the new model
    assert stays(bonus) >= stays(plain)


def test_the_warm_start_is_offered_only_where_the_change_allows_it():
    ri = parse_round_input(_example())
    inner = goodput_model(ri)
    assert CustomizedModel(inner, lambda m: None).start() is not None
    no_staying = CustomizedModel(inner, lambda m: setattr(m, "no_stay", pyo.Constraint(
        expr=sum(m.x[j, o] for j, o in m.C if o == "stay") == 0)))
    assert no_staying.start() is None


def test_a_new_variable_reaches_every_solver_and_the_reported_objective():
    """At most 40 GPUs busy, or pay 0.05 a GPU above: a new variable in a new row and the objective."""
    def soft_cap(m):
        m.over = pyo.Var(bounds=(0, 64))  # bounded: CP-SAT takes no unbounded variable
        m.cap = pyo.Constraint(expr=sum(m.gpus[c] * m.x[c] for c in m.C) <= 40 + m.over)
        m.obj.expr = m.obj.expr - 0.05 * m.over

    raw = _example()
    answers = {s: solve_round(raw, solver=s, customize=soft_cap) for s in ("appsi_highs", "highs", "cpsat")}
    plain = solve_round(raw, solver="highs")
    used = sum(len(a.gpus) for a in plain.allocations)
    assert used > 40  # the cap binds
    for result in answers.values():
        assert result.status == "optimal"
        assert result.objective == pytest.approx(answers["appsi_highs"].objective, rel=1e-6)
        # the plain optimum, charged for its GPUs above 40, is a point of the changed model
        assert result.objective >= plain.objective - 0.05 * (used - 40) - 1e-6
        assert result.objective <= plain.objective + 1e-6


def test_a_customized_round_is_solved_whole():
    with pytest.raises(InputError) as err:
        solve_round(_example(), partitions=2, customize=at_most_8_gpus)
    assert err.value.problems[0].startswith("settings.partitions: a customized round is solved whole")


def test_cli_writes_the_model_with_readable_names(tmp_path):
    path = tmp_path / "round.lp"
    out = subprocess.run([sys.executable, "-m", "schedlab.cli", "solve", str(EXAMPLE), "--write", str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "optimal"
    text = path.read_text()
    assert "x(bert_4_g0_2n_8gpu)" in text and "one(bert_4)" in text


def test_a_level_with_nothing_to_bound_is_left_out_not_an_error():
    """One waiting job of at most one GPU: the levels of 2 and 4 GPUs bound nothing; Pyomo refused
    the trivial rows and every Pyomo solver fell back to the greedy answer."""
    raw = _example()
    raw["jobs"] = [{k: v for k, v in raw["jobs"][0].items() if k != "current_gpus"} | {"max_gpus": 1}]
    assert "level" in {c.local_name for c in build_model(raw).component_objects(pyo.Constraint)}
    assert solve_round(raw, solver="appsi_highs").status == "optimal"


@pytest.mark.parametrize("solver", ["appsi_highs", "highs"])
def test_one_customization_runs_on_the_joint_model_too(solver):
    """The joint model names x and its parameters as goodput does: the same function caps it."""
    raw = json.loads((EXAMPLE.parent / "round-joint-16x4.json").read_text())
    raw["jobs"] = [j for j in raw["jobs"] if j.get("application") in ("imagenet", "bert")]
    ids = {j["id"] for j in raw["jobs"]}
    assert {job for job, _ in build_model(raw).C} == ids
    base = solve_round(raw, solver=solver)
    capped = solve_round(raw, solver=solver, customize=at_most_8_gpus)
    assert max(len(a.gpus) for a in base.allocations) > 8 >= max(len(a.gpus) for a in capped.allocations)
    assert capped.status == "optimal" and capped.objective < base.objective


def test_the_placement_model_is_named_by_jobs_gpu_types_and_nodes():
    raw = json.loads((EXAMPLE.parent / "round-joint-16x4.json").read_text())
    raw["settings"] = {"formulation": "placement"}
    m = build_model(raw)
    assert list(m.J)[:2] == [raw["jobs"][0]["id"], raw["jobs"][1]["id"]] and list(m.N)[0] == "n0"
    assert all(k.startswith("n") and "/" in k for k in m.K)


def test_an_equality_reaches_the_array_solvers_as_both_bounds():
    def exactly_3_of_4_gpus_or_more(m):
        m.three = pyo.Constraint(expr=sum(m.x[c] for c in m.C if m.gpus[c] >= 4) == 3)

    raw = _example()
    plain = solve_round(raw, solver="highs")
    assert sum(len(a.gpus) >= 4 for a in plain.allocations) != 3  # the row binds
    for solver in ("appsi_highs", "highs", "cpsat"):
        result = solve_round(raw, solver=solver, customize=exactly_3_of_4_gpus_or_more)
        assert result.status == "optimal" and sum(len(a.gpus) >= 4 for a in result.allocations) == 3
