"""The public replay API (schedlab.replay) and the trace specs it shares with the CLI and sweeps."""

from __future__ import annotations

import doctest
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import schedlab
from schedlab.errors import ConfigError
from schedlab.sim.world import PAL_WORLD, WORLDS
from schedlab.trace_specs import PhillyTrace, SiaPhillyTrace, SyntheticTrace, WorkloadTrace, trace_spec
from schedlab.traces import load_sia_philly, load_workload, sia_philly_jobs, synthetic_workload, trace_jobs

JOB_COLUMNS = ["name", "application", "submit_s", "completion_s", "jct_s", "num_replicas", "batch_size", "restarts",
               "attained_gpu_s", "epochs_done", "isolated_s", "ftf", "freeze_budget", "penalty_spent", "app_class",
               "work_s"]
ROUND_COLUMNS = ["time_s", "active_jobs", "solve_ms", "status", "objective", "running_jobs", "gpus_used"]


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory):
    path = tmp_path_factory.mktemp("w") / "w.csv"
    synthetic_workload(5, 60.0, np.random.default_rng(1), mix={"ncf": 1}).to_csv(path, index=False)
    return path


def test_one_row_per_job_and_per_round(small_csv):
    result = schedlab.replay(str(small_csv), "tiresias", num_nodes=2)
    assert list(result.jobs.columns) == JOB_COLUMNS and list(result.rounds.columns) == ROUND_COLUMNS
    assert list(result.jobs.name) == list(load_workload(small_csv).name)
    assert len(result.rounds) == result.summary["rounds"] and result.rounds.time_s.is_monotonic_increasing
    assert result.summary["jobs_completed"] == 5 and result.jobs.jct_s.notna().all()
    assert result.summary["mean_jct_s"] == result.jobs.jct_s.mean()
    assert (result.rounds.gpus_used <= 8).all()


def test_the_mean_jct_is_schedlab_replays(small_csv, tmp_path):
    cli = subprocess.run([sys.executable, "-m", "schedlab.cli", "replay", "--workload", str(small_csv), "--policy",
                          "pollux", "--nodes", "2", "--json", "--quiet", "--out", str(tmp_path)],
                         capture_output=True, text=True, check=True)
    result = schedlab.replay(small_csv, "pollux", num_nodes=2)
    assert result.summary["mean_jct_s"] == json.loads(cli.stdout)["mean_jct_s"]
    written = pd.read_csv(tmp_path / "jobs.csv")
    np.testing.assert_allclose(written.jct_s, result.jobs.jct_s)


def test_a_dataframe_max_jobs_and_load_select_the_jobs():
    workload = load_workload("workload-6")
    result = schedlab.replay(workload, "fifo", max_jobs=6, load=2.0)
    first = workload.sort_values("time", kind="stable").head(6)
    assert list(result.jobs.name) == list(first.name)
    np.testing.assert_allclose(result.jobs.submit_s, first.time / 2.0)


def test_the_docstring_example_runs():
    import schedlab.replay_api

    assert doctest.testmod(schedlab.replay_api).failed == 0


@pytest.mark.parametrize(("call", "message"), [
    (lambda: schedlab.replay("workload-6", "fifo", world="moon"), "world 'moon': use one of pollux, pal"),
    (lambda: schedlab.replay("workload-6", "fifo", nodes=4), "unknown replay option 'nodes'; use one of .*num_nodes"),
    (lambda: schedlab.replay(42, "fifo"), "trace 42: give a TraceSpec"),
    (lambda: schedlab.replay("workload-6", "fifo", max_jobs=0), "max_jobs 0 must be >= 1"),
])
def test_bad_arguments_name_the_fix(call, message):
    with pytest.raises(ConfigError, match=message):
        call()


def test_with_options_sets_the_config_or_its_cluster_and_checks_both():
    config = WORLDS["pollux"].with_options(num_nodes=3, round_s=30.0, seed=7)
    assert (config.cluster.num_nodes, config.round_s, config.cluster.seed, config.total_gpus) == (3, 30.0, 7, 12)
    assert config.options()["num_nodes"] == 3 and config.with_options() == config
    with pytest.raises(ConfigError, match="cluster: num_nodes must be >= 1"):
        config.with_options(num_nodes=0)
    with pytest.raises(ConfigError, match="replay config: round_s must be > 0"):
        config.with_options(round_s=0.0)


def test_a_cells_trace_is_the_spec_the_cli_builds():
    rng = np.random.default_rng
    assert trace_spec({"kind": "workload", "name": "workload-2"}) == WorkloadTrace("workload-2")
    # PAL's world reads a Sia-Philly trace as jobs of fixed work, Pollux's as a workload of its arrivals
    spec = trace_spec({"kind": "sia_philly", "name": "workload-1"})
    assert spec == SiaPhillyTrace("workload-1") and spec.label == "sia-philly/workload-1"
    first = load_sia_philly("workload-1").sort_values("submit_time", kind="stable").head(20)
    assert spec.replay_jobs(PAL_WORLD, rng(0), max_jobs=20) == sia_philly_jobs(first)
    assert all(j.work_s is None for j in spec.replay_jobs(WORLDS["pollux"], rng(0)))
    synthetic = trace_spec({"kind": "synthetic", "jobs": 12, "jobs_per_hour": 30.0})
    assert synthetic.replay_jobs(WORLDS["pollux"], rng(3)) == trace_jobs(synthetic_workload(12, 30.0, rng(3)))
    assert synthetic.label == "synthetic-12j-30ph"


@pytest.mark.parametrize(("raw", "message"), [
    ({"kind": "moon"}, "trace kind 'moon': use one of workload, sia_philly"),
    ({"kind": "synthetic", "jobs": 12}, "missing jobs_per_hour; a synthetic trace takes jobs, jobs_per_hour, mix"),
    ({"kind": "philly", "jobs": 0}, "jobs must be an integer >= 1"),
])
def test_a_bad_trace_spec_names_the_fix(raw, message):
    with pytest.raises(ConfigError, match=message):
        trace_spec(raw)


def test_the_horizon_drains_after_the_last_submission():
    jobs = WorkloadTrace("workload-6").replay_jobs(WORLDS["pollux"], np.random.default_rng(0))
    last = max(j.submit_s for j in jobs)
    assert PhillyTrace().horizon_s(jobs, WORLDS["pollux"]) == last + WORLDS["pollux"].horizon_s
    assert SyntheticTrace(3, 1.0).horizon_s(jobs, WORLDS["pal"]) == last + WORLDS["pal"].horizon_s
