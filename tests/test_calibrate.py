"""Calibration: the harness on CPU with a tiny model, the table and its all-reduce rows, the fit,
and the tables as replay ground truth and solve_round() profiles."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from schedlab.calibrate.table import COLUMNS, AllReduceModel, fit_table, measured_table, read_table, table_frame, write_table
from schedlab.models.throughput import step_time_s, sync_time_s
from schedlab.state import ThroughputParams

torch = pytest.importorskip("torch")
from schedlab.calibrate import harness  # noqa: E402
from schedlab.calibrate.harness import Measurement, measure  # noqa: E402
from schedlab.calibrate.zoo import ZOO, ZooModel, build  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    return measure(build("tiny-mlp"), [4, 16, 64], "cpu", warmup=1, steps=3, frozen_groups=True)


def test_harness_measures_every_batch_then_each_frozen_prefix(tiny):
    assert [(m.local_bsz, m.frozen_groups) for m in tiny] == [(4, 0), (16, 0), (64, 0), (64, 1), (64, 2)]
    assert all(m.step_time > 0 and m.steps == 3 and m.gpu_type.startswith("cpu-") for m in tiny)
    trained = [m.param_bytes for m in tiny[2:]]
    assert trained == sorted(trained, reverse=True) and trained[-1] < trained[0]


def test_bf16_runs_the_forward_pass_in_bfloat16_and_says_so():
    model = build("tiny-mlp")
    seen = []
    model.groups[0][0].register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    got = measure(model, [4, 8], "cpu", warmup=0, steps=1, precision="bf16")
    assert set(seen) == {torch.bfloat16} and {m.precision for m in got} == {"bf16"}
    assert all(p.dtype == torch.float32 for p in model.module.parameters())  # the weights stay float32
    frame = table_frame(got)
    assert set(frame.precision) == {"bf16"}
    assert measured_table(frame, "tiny-mlp", "bf16").step_sync_s((1,), 8)[0] == pytest.approx(got[1].step_time)
    with pytest.raises(ValueError, match=r"in fp32.*\('tiny-mlp', 'bf16'\)"):
        measured_table(frame, "tiny-mlp")


def test_a_weight_two_groups_share_is_frozen_with_the_first():
    # GPT-2 style: the output projection is the token embedding
    embed, middle, head = torch.nn.Embedding(16, 8), torch.nn.Linear(8, 8), torch.nn.Linear(8, 16, bias=False)
    head.weight = embed.weight
    net = torch.nn.Sequential(embed, middle, head)
    model = ZooModel("tied", net, lambda bsz, gen, device: (torch.randint(0, 16, (bsz,), generator=gen),) * 2,
                     lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1]), ((embed,), (middle,), (head,)))
    harness._freeze(model, 1)
    harness.time_steps(model, 4, "cpu", warmup=0, steps=1)
    assert embed.weight.grad is None and middle.weight.grad is not None


def test_frozen_groups_get_no_gradient():
    model = build("tiny-mlp")
    harness._freeze(model, 2)
    harness.time_steps(model, 8, "cpu", warmup=0, steps=1)
    frozen, trained = model.groups[0][0], model.groups[2][0]
    assert all(p.grad is None for p in frozen.parameters())
    assert all(p.grad is not None for p in trained.parameters())


def test_measurement_stops_at_the_first_batch_that_runs_out_of_memory(monkeypatch):
    real = harness.time_steps

    def fake(model, bsz, *args, **kwargs):
        if bsz > 16:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, bsz, *args, **kwargs)

    monkeypatch.setattr(harness, "time_steps", fake)
    got = measure(build("tiny-mlp"), [4, 16, 64, 256], "cpu", warmup=0, steps=1)
    assert [m.local_bsz for m in got] == [4, 16]


def test_other_errors_are_not_taken_for_out_of_memory(monkeypatch):
    monkeypatch.setattr(harness, "time_steps", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("shape mismatch")))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        measure(build("tiny-mlp"), [4], "cpu")


def test_zoo_builds_offline_with_the_published_sizes():
    sizes = {name: sum(p.numel() for p in build(name).module.parameters()) / 1e6 for name in ("resnet18", "resnet50", "ncf")}
    assert sizes["resnet18"] == pytest.approx(11.17, rel=0.01)
    assert sizes["resnet50"] == pytest.approx(25.56, rel=0.01)
    assert sizes["ncf"] == pytest.approx(0.39, rel=0.02)
    assert set(ZOO) >= {"resnet18", "resnet50", "bert-base", "gpt2-small", "ncf"}


def test_allreduce_rows_follow_the_ring_model():
    model = AllReduceModel(intra_node_gbps=100.0, inter_node_gbps=10.0, latency_s=0.0)
    m = Measurement("x", "cpu", "cpu-2t", 32, 0, 0.1, 320.0, float("nan"), 5, 4e8)
    frame = table_frame([m], model).set_index("placement")
    assert frame.loc["1", "sync_time"] == 0.0
    assert frame.loc["4", "sync_time"] == pytest.approx(2 * 3 / 4 * 4e8 / 100e9)
    assert frame.loc["44", "sync_time"] == pytest.approx(2 * 7 / 8 * 4e8 / 10e9)
    assert frame.loc["44", "step_time"] == pytest.approx(0.1 + frame.loc["44", "sync_time"])


def _synthetic_table(params: ThroughputParams, tmp_path, batch_sizes=(8, 16, 32, 64, 128)):
    """A table whose step times follow Pollux's model exactly (gamma = 1: step = compute + sync,
    as the fit reads step - sync as compute), written as tables were before they had a precision."""
    rows = []
    for placement in ("1", "2", "4", "44", "4444"):
        n, r = len(placement), sum(map(int, placement))
        for bsz in batch_sizes:
            step = float(step_time_s(params, n, r, bsz))
            rows.append({"model": "net", "gpu_type": "gpu-x", "device": "cpu", "placement": placement, "num_nodes": n,
                         "num_replicas": r, "local_bsz": bsz, "frozen_groups": 0, "step_time": step,
                         "sync_time": float(sync_time_s(params, n, r)) if r > 1 else 0.0,
                         "samples_per_s": r * bsz / step, "peak_mem_mb": np.nan, "param_bytes": 1e8, "source": "test"})
    return write_table(pd.DataFrame(rows, columns=[c for c in COLUMNS if c != "precision"]), tmp_path / "net.csv")


def test_a_table_without_precisions_is_read_as_fp32(tmp_path):
    frame = read_table(_synthetic_table(ThroughputParams(0.02, 0.004, 0.3, 0.02, 0.05, 0.01, 1.0), tmp_path))
    assert set(frame.precision) == {"fp32"}
    assert [f.precision for f in fit_table(frame)] == ["fp32"]


def test_the_fit_follows_a_gpu_faster_than_pollux_floor(tmp_path):
    # NCF on an H100: ~2 ns a sample, below Pollux's 1e-8 s floor; batches up to 2 million
    truth = ThroughputParams(1e-3, 2e-9, 0.3, 0.02, 0.05, 0.01, 1.0)
    frame = read_table(_synthetic_table(truth, tmp_path, batch_sizes=tuple(2**k for k in range(8, 22, 3))))
    (fit,) = fit_table(frame)
    assert fit.rmsle < 0.05
    assert fit.params.beta_c == pytest.approx(2e-9, rel=0.2)


def test_fit_recovers_a_table_that_follows_the_model(tmp_path):
    truth = ThroughputParams(0.02, 0.004, 0.3, 0.02, 0.05, 0.01, 1.0)
    (fit,) = fit_table(read_table(_synthetic_table(truth, tmp_path)))
    assert fit.model == "net" and fit.gpu_type == "gpu-x" and fit.points == 25
    assert fit.rmsle < 0.05


def test_cli_fit_prints_the_error_and_profiles(tmp_path):
    path = _synthetic_table(ThroughputParams(0.02, 0.004, 0.3, 0.02, 0.05, 0.01, 1.0), tmp_path)
    fit = [sys.executable, "-m", "schedlab.cli", "calibrate", "--fit", str(path)]
    text = subprocess.run(fit, capture_output=True, text=True, check=True).stdout
    assert "net" in text and "RMSLE" in text
    profile = json.loads(subprocess.run(fit + ["--json"], capture_output=True, text=True, check=True).stdout)["net/fp32"]
    assert profile["rmsle"] < 0.05 and profile["points"] == 25
    assert set(profile["throughput_params"]["gpu-x"]) == {"alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r",
                                                         "beta_r", "gamma"}


def test_cli_names_an_unknown_precision():
    res = subprocess.run([sys.executable, "-m", "schedlab.cli", "calibrate", "--model", "tiny-mlp",
                          "--precision", "fp32,fp16", "--out", "unused.csv"], capture_output=True, text=True)
    assert res.returncode != 0 and "--precision 'fp16'" in res.stderr and "bf16" in res.stderr


def test_a_calibrated_table_is_the_replays_ground_truth(tiny, tmp_path):
    from schedlab.policies import make_policy
    from schedlab.sim.engine import replay
    from schedlab.sim.world import ReplayConfig
    from schedlab.traces import synthetic_workload, trace_jobs

    frame = table_frame([m for m in tiny if m.frozen_groups == 0])
    table = measured_table(frame, "tiny-mlp")
    jobs = trace_jobs(synthetic_workload(3, 40.0, np.random.default_rng(0), mix={"ncf": 1}))
    base = ReplayConfig().with_options(num_nodes=2, gpus_per_node=4)
    shipped = replay(jobs, make_policy("pollux"), base).summary["mean_jct_s"]
    calibrated = replay(jobs, make_policy("pollux"), base.with_options(calibration=(("ncf", table),))).summary["mean_jct_s"]
    assert np.isfinite(calibrated) and calibrated != pytest.approx(shipped, rel=1e-3)


def test_the_package_never_imports_torch_outside_calibration():
    code = ("import sys, schedlab, schedlab.cli, schedlab.sim.engine, schedlab.sweep, schedlab.calibrate.table; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_cli_names_bad_batch_sizes():
    res = subprocess.run([sys.executable, "-m", "schedlab.cli", "calibrate", "--model", "tiny-mlp",
                          "--batch-sizes", "8,x", "--out", "unused.csv"], capture_output=True, text=True)
    assert res.returncode != 0 and "--batch-sizes" in res.stderr
