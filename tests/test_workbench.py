"""A/B on the same rounds: schedlab record and schedlab compare."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
from conftest import needs_pyomo_solver

import schedlab
from schedlab.errors import ConfigError
from schedlab.policies import make_policy
from schedlab.sim.engine import replay
from schedlab.sim.world import WORLDS
from schedlab.traces import load_workload, trace_jobs
from schedlab.workbench import compare, read_rounds, recorder, render, summary, variants

SCHEMA = json.loads((Path(schedlab.__file__).parent / "schemas" / "round_input.schema.json").read_text())


@pytest.fixture(scope="module")
def rounds_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rounds") / "rounds.jsonl"
    out = subprocess.run([sys.executable, "-m", "schedlab.cli", "record", "--workload", "workload-6", "--policy",
                          "pollux", "--rounds", "12", "--out", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return path


def test_record_writes_the_rounds_the_policy_solved_in_the_published_schema(rounds_file):
    rounds = list(read_rounds(rounds_file))
    assert len(rounds) == 12
    for raw in rounds:
        jsonschema.validate(raw, SCHEMA)
        assert raw["jobs"] and raw["settings"]["p"] == -1.0  # pollux's settings, not the engine's defaults


def test_recording_leaves_the_replay_unchanged():
    jobs = trace_jobs(load_workload("workload-6"))
    plain = replay(jobs, make_policy("pollux"), WORLDS["pollux"]).summary["mean_jct_s"]
    recorded = replay(jobs, recorder(make_policy("pollux"), io.StringIO(), 5), WORLDS["pollux"]).summary["mean_jct_s"]
    assert recorded == plain


def test_only_round_model_policies_can_be_recorded():
    with pytest.raises(ConfigError, match="tiresias"):
        recorder(make_policy("tiresias"), io.StringIO(), 5)


def test_compare_solves_every_round_with_every_variant_and_finds_the_same_optima(rounds_file):
    rounds = list(read_rounds(rounds_file))
    per_round = compare(rounds, variants(["highs", "cpsat", "appsi_highs"], []))
    assert len(per_round) == 3 * len(rounds)
    assert set(per_round.status) == {"optimal"}
    assert per_round.objective_vs_first.abs().max() <= 1e-4  # within the rounds' mip_gap
    table = summary(per_round)
    assert list(table.variant) == ["highs", "cpsat", "appsi_highs"] and set(table.rounds) == {len(rounds)}
    assert "| variant" in render(table, "md") and "\\toprule" in render(table, "latex")
    assert render(per_round, "csv").splitlines()[0].startswith("round,variant,jobs,status,objective")


@needs_pyomo_solver("cbc")
def test_compare_cli_takes_a_customization(rounds_file, tmp_path):
    (tmp_path / "changes.py").write_text(
        "import pyomo.environ as pyo\n"
        "def one_gpu(m):\n"
        "    m.one_gpu = pyo.Constraint(m.C, rule=lambda m, j, o: m.x[j, o] == 0 if m.gpus[j, o] > 1 "
        "else pyo.Constraint.Skip)\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    out = subprocess.run([sys.executable, "-m", "schedlab.cli", "compare", str(rounds_file), "--solver", "appsi_highs",
                          "--solver", "cbc", "--customize", "changes:one_gpu", "--per-round", "--format", "csv"],
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "optimal" in out.stdout and "fallback" not in out.stdout
    customized = subprocess.run([sys.executable, "-m", "schedlab.cli", "compare", str(rounds_file), "--solver",
                                 "appsi_highs", "--per-round", "--format", "csv", "--customize", "changes:one_gpu"],
                                capture_output=True, text=True, env=env).stdout
    plain = subprocess.run([sys.executable, "-m", "schedlab.cli", "compare", str(rounds_file), "--solver",
                            "appsi_highs", "--per-round", "--format", "csv"], capture_output=True, text=True).stdout
    objectives = [[float(line.split(",")[4]) for line in text.splitlines()[1:13]] for text in (customized, plain)]
    assert all(c <= p + 1e-9 for c, p in zip(*objectives)) and any(c < p - 1e-6 for c, p in zip(*objectives))
    bad = subprocess.run([sys.executable, "-m", "schedlab.cli", "compare", str(rounds_file), "--customize", "nosuch"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "--customize nosuch: give module:function" in bad.stderr
