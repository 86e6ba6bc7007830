"""Gavel's data and world: its table read as Gavel reads it, the fits shipped, its traces, and
jobs that progress at the table's rate on every policy of the registry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import schedlab
from schedlab.clusters import NodePool
from schedlab.errors import ConfigError
from schedlab.models.gavel import (
    fit_job_type,
    gavel_dir,
    gavel_table,
    per_gpu_batch,
    read_table,
    refit,
    shipped_params,
    steps_per_s,
)
from schedlab.models.throughput import rmsle, step_time_s
from schedlab.policies import POLICIES
from schedlab.sweep import parse_sweep, run_sweep
from schedlab.trace_specs import GavelTrace, trace_spec
from schedlab.traces import gavel_jobs, load_gavel_trace, shipped_gavel_traces

RAW = json.loads((gavel_dir() / "simulation_throughputs.json").read_text())
# Step-time RMSLE of the 7-parameter model over a job type's 4-7 points on one GPU type. Measured:
# median 0.029, largest 0.332 (LM on V100: 132 steps/s on 2 GPUs, 111 on 4); room for solver noise only.
MAX_FIT_RMSLE = 0.35
SMALL = tuple(NodePool(t, 2, 4) for t in ("v100", "p100", "k80"))  # 8 GPUs of each type, servers of 4


def _trace(path: Path, rows: list[tuple[str, int, float, int]]) -> Path:
    """A trace in the msr traces' 7-field layout: (job type, scale factor, arrival s, steps) a line."""
    path.write_text("".join(f"{job}\tpython3 train.py\t--steps\t0\t{steps}\t{t:.6f}\t{sf}\n" for job, sf, t, steps in rows))
    return path


def test_the_table_reads_as_gavel_reads_it():
    table = gavel_table()
    assert len(table.job_types) == 26 and table.gpu_types == ("v100", "p100", "k80")
    for type_key, jobs in RAW.items():
        gpu_type, consolidated = type_key.removesuffix("_unconsolidated"), not type_key.endswith("_unconsolidated")
        for key, row in jobs.items():
            job_type, scale_factor = key[2:].rsplit("', ", 1)
            assert table.rate(job_type, int(scale_factor[:-1]), gpu_type, consolidated) == row["null"]
    assert table.rate("A3C", 2, "v100") is None  # Gavel measured A3C on one GPU only
    assert table.scale_factors("ResNet-50 (batch size 128)", "k80") == (1,)  # 0 on more: it does not run so
    assert per_gpu_batch("Recommendation (batch size 8192)") == 8192 and per_gpu_batch("CycleGAN") == 1


def test_a_table_with_a_bad_entry_is_refused_naming_it(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"v100": {"('A3C', 1)": {"null": -1.0}}}))
    with pytest.raises(ConfigError, match=r"v100 \('A3C', 1\): 'null' must be a throughput >= 0"):
        read_table(path)
    path.write_text(json.dumps({"v100": {"A3C at 1": {"null": 1.0}}}))
    with pytest.raises(ConfigError, match="key 'A3C at 1' is not"):
        read_table(path)


def test_shipped_fits_match_a_fresh_fit_and_the_table():
    fresh = refit()
    shipped = shipped_params()
    assert fresh.keys() == shipped.keys()
    for job_type, by_type in fresh.items():
        assert by_type.keys() == shipped[job_type].keys()
        for gpu_type, fit in by_type.items():
            assert fit["fit_rmsle"] <= MAX_FIT_RMSLE
            assert shipped[job_type][gpu_type].fit_rmsle == pytest.approx(fit["fit_rmsle"], abs=0.01)
            pts = gavel_table().measured_table(job_type, gpu_type).points().astype(float)
            pred = step_time_s(shipped[job_type][gpu_type].params, pts.num_nodes.to_numpy(), pts.num_replicas.to_numpy(),
                               pts.local_bsz.to_numpy())
            assert rmsle(pred, pts.step_time.to_numpy()) <= MAX_FIT_RMSLE


def test_a_fit_reproduces_a_well_scaling_job_type():
    fit = fit_job_type(gavel_table(), "ResNet-50 (batch size 64)", "p100")
    assert fit.fit_rmsle < 0.05
    for sf in (1, 2, 4, 8):
        modelled = sf / float(step_time_s(fit.params, 1, sf, 64))
        assert modelled == pytest.approx(gavel_table().rate("ResNet-50 (batch size 64)", sf, "p100"), rel=0.1)


def test_rates_are_measured_where_gavel_measured_and_modelled_elsewhere():
    assert steps_per_s("LM (batch size 20)", 4, "v100", False) == RAW["v100_unconsolidated"]["('LM (batch size 20)', 4)"]["null"]
    one = steps_per_s("A3C", 1, "k80", True)
    assert steps_per_s("A3C", 4, "k80", True) == pytest.approx(4 * one, rel=1e-3)  # one point: linear scaling
    assert steps_per_s("ResNet-50 (batch size 128)", 2, "k80", True) == 0.0


def test_the_shipped_traces_are_the_msr_ones_of_at_most_8_gpus():
    assert sorted(shipped_gavel_traces()) == ["0e4a51", "103959", "23dbec", "51b7ef", "6214e9", "795a4c", "925e2b",
                                              "ed69ec"]
    trace = load_gavel_trace("0e4a51")
    assert len(trace) == 1181 and trace.num_replicas.max() == 8 and trace.time.is_monotonic_increasing
    job = gavel_jobs(trace)[0]
    assert job.steps == 95121 and job.num_replicas == 1 and job.batch_size == 128


def test_both_trace_layouts_read_the_same_jobs(tmp_path):
    seven = _trace(tmp_path / "a.trace", [("LM (batch size 20)", 4, 12.5, 300), ("A3C", 1, 3.0, 70)])
    ten = tmp_path / "b.trace"
    ten.write_text("LM (batch size 20)\tpython3 main.py\tlm\t--steps\t1\t300\t4\t1.0\t-1\t12.5\n"
                   "A3C\tpython3 main.py\trl\t--max-steps\t0\t70\t1\t1.0\t-1\t3.0\n")
    assert gavel_jobs(load_gavel_trace(seven)) == gavel_jobs(load_gavel_trace(ten))
    first = gavel_jobs(load_gavel_trace(seven))[0]  # sorted by arrival, numbered in the trace's order
    assert (first.application, first.submit_s, first.num_replicas, first.batch_size, first.steps) == ("A3C", 3.0, 1, 1, 70)


@pytest.mark.parametrize(("line", "message"), [
    ("A3C\tcmd\t-n\t0\t70\t3.0", "line 2: 6 tab-separated fields"),
    ("A3C\tcmd\t-n\t0\tmany\t3.0\t1", "line 2: field total_steps 'many' is not an integer"),
    ("A3C\tcmd\t-n\t0\t70\t-3.0\t1", "line 2: field arrival_time '-3.0' must be >= 0"),
    ("A3C\tcmd\t-n\t0\t70\t3.0\t0", "line 2: field scale_factor '0' must be >= 1"),
    ("GPT-5\tcmd\t-n\t0\t70\t3.0\t1", "line 2: field job_type 'GPT-5' is not in Gavel's throughput table"),
])
def test_a_bad_trace_line_is_refused_naming_its_line_and_field(tmp_path, line, message):
    path = tmp_path / "bad.trace"
    path.write_text("A3C\tcmd\t-n\t0\t70\t1.0\t1\n" + line + "\n")
    with pytest.raises(ConfigError, match=message):
        load_gavel_trace(path)


def test_a_gavel_trace_is_a_trace_kind():
    spec = trace_spec({"kind": "gavel", "name": "795a4c"})
    assert spec == GavelTrace("795a4c") and spec.label == "gavel/795a4c"


def _lone_jct_s(tmp_path: Path, job_type: str, scale_factor: int, steps: int, policy: str, **options) -> float:
    path = _trace(tmp_path / "lone.trace", [(job_type, scale_factor, 0.0, steps)])
    result = schedlab.replay(GavelTrace(str(path)), policy, "gavel", **options)
    assert result.summary["jobs_completed"] == 1
    return float(result.jobs.jct_s.iloc[0])


def test_a_lone_job_runs_at_the_tables_rate_consolidated_or_not(tmp_path):
    job, steps = "Transformer (batch size 128)", 50_000
    # fifo takes the type with the most free GPUs (ties: the first, V100) and the most free servers
    on_one_server = _lone_jct_s(tmp_path, job, 4, steps, "fifo")
    assert on_one_server == pytest.approx(steps / RAW["v100"][f"('{job}', 4)"]["null"], rel=1e-12)
    over_two_servers = _lone_jct_s(tmp_path, job, 8, steps, "fifo")  # 8 GPUs on servers of 4
    assert over_two_servers == pytest.approx(steps / RAW["v100_unconsolidated"][f"('{job}', 8)"]["null"], rel=1e-12)
    on_eight = _lone_jct_s(tmp_path, job, 8, steps, "fifo", pools=(NodePool("v100", 1, 8),))
    assert on_eight == pytest.approx(steps / RAW["v100"][f"('{job}', 8)"]["null"], rel=1e-12)


def test_a_heterogeneity_aware_policy_puts_a_lone_job_on_its_fastest_type(tmp_path):
    job, steps = "Recommendation (batch size 2048)", 20_000  # 16.6 steps/s on a P100, 7.5 on a V100
    assert _lone_jct_s(tmp_path, job, 1, steps, "sia") == pytest.approx(steps / RAW["p100"][f"('{job}', 1)"]["null"])


def test_a_cluster_without_the_jobs_gpu_types_is_refused(tmp_path):
    path = _trace(tmp_path / "t.trace", [("A3C", 1, 0.0, 100)])
    with pytest.raises(ConfigError, match="runs on v100, p100, k80 GPUs, the cluster has t4"):
        schedlab.replay(GavelTrace(str(path)), "fifo", "gavel", pools=(NodePool("t4", 2, 4),))
    path = _trace(tmp_path / "t.trace", [("ResNet-18 (batch size 64)", 8, 0.0, 100)])
    with pytest.raises(ConfigError, match="needs 8 GPUs of one type, the cluster has at most 4"):
        schedlab.replay(GavelTrace(str(path)), "fifo", "gavel", pools=(NodePool("v100", 1, 4), NodePool("k80", 1, 4)))


TINY = [("ResNet-18 (batch size 64)", 8, 0.0, 40_000), ("A3C", 2, 30.0, 20_000), ("LM (batch size 20)", 4, 60.0, 60_000),
        ("Transformer (batch size 128)", 2, 100.0, 20_000), ("ResNet-18 (batch size 64)", 1, 200.0, 10_000),
        ("Recommendation (batch size 2048)", 1, 400.0, 10_000), ("ResNet-50 (batch size 128)", 4, 500.0, 5_000),
        ("CycleGAN", 1, 900.0, 3_000)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_every_policy_runs_gavels_jobs_to_completion(tmp_path, policy):
    path = _trace(tmp_path / "tiny.trace", TINY)
    # the engine verifies every round: one type per job, exactly its scale factor, capacity
    result = schedlab.replay(GavelTrace(str(path)), policy, "gavel", pools=SMALL)
    assert result.summary["jobs_completed"] == len(TINY)
    assert (result.rounds.gpus_used <= 24).all() and (result.rounds.status != "fallback").all()
    assert np.diff(result.rounds.time_s).tolist() == [360.0] * (len(result.rounds) - 1)
    # no job beats its steps at its fastest rate, consolidated on its fastest type
    assert (result.jobs.jct_s >= result.jobs.isolated_s * (1 - 1e-12)).all()


def test_gavel_replays_from_the_cli():
    out = subprocess.run([sys.executable, "-m", "schedlab.cli", "replay", "--world", "gavel", "--gavel-trace", "795a4c",
                          "--policy", "tiresias", "--quiet", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["jobs_total"] == 3 and summary["jobs_completed"] == 3


def test_a_sweep_replays_gavel_traces(tmp_path):
    sweep = parse_sweep('[sweep]\nname = "g"\nworld = "gavel"\n\n[traces]\ngavel = ["795a4c", "925e2b"]\n\n'
                        '[grid]\npolicies = ["fifo", "sia"]\n')
    assert [c["trace"] for c in sweep.cells[::2]] == [{"kind": "gavel", "name": "795a4c"}, {"kind": "gavel", "name": "925e2b"}]
    records, failed = run_sweep(sweep, tmp_path / "out", workers=1, progress=False)
    assert failed == [] and all(r["summary"]["jobs_completed"] == r["summary"]["jobs_total"] for r in records)


def test_a_pollux_workload_runs_on_the_gavel_world_at_its_derived_speeds():
    """Pollux's applications on V100, P100 and K80 at their speed ratios to the T4 (models.type_speeds)."""
    summary = schedlab.replay("workload-1", "fifo", "gavel", max_jobs=2).summary
    assert summary["jobs_completed"] == summary["jobs_total"] == 2
