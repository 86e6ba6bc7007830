"""The reader of Sia's artifact layout, on a tiny folder written in that layout (never Sia's data):
per-type fits that tell the types apart, the validation tables' fields, and errors naming what
is missing."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from schedlab.errors import ConfigError
from schedlab.models.sia_artifact import read_application, read_artifact, workload_paths
from schedlab.models.throughput import step_time_s, sync_time_s
from schedlab.state import ThroughputParams
from schedlab.traces import load_workload

# Made-up parameters: the "fast" type computes 3x faster than the "slow" one.
SLOW = ThroughputParams(alpha_c=0.03, beta_c=0.003, alpha_n=0.05, beta_n=0.004, alpha_r=0.01, beta_r=0.001, gamma=1.5)
FAST = ThroughputParams(alpha_c=0.01, beta_c=0.001, alpha_n=0.05, beta_n=0.004, alpha_r=0.01, beta_r=0.001, gamma=1.5)
LOCAL = {"fast": (16, 32, 64, 128), "slow": (16, 32, 64)}  # the slow type fits smaller batches


def _tables(params: ThroughputParams, local: tuple[int, ...]) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = [(placement, m, float(step_time_s(params, len(placement), sum(map(int, placement)), m)),
             float(sync_time_s(params, len(placement), sum(map(int, placement)))))
            for placement in ("1", "2", "4", "22", "44") for m in local]
    placements = pd.DataFrame(rows, columns=["placement", "local_bsz", "step_time", "sync_time"])
    scale = [(n, n * 4, m, float(step_time_s(params, n, n * 4, m)), float(sync_time_s(params, n, n * 4)))
             for n in (3, 4) for m in local]
    return placements, pd.DataFrame(scale, columns=["num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"])


def write_artifact(root: Path) -> Path:
    """traces/net/{placements,scalability}-{fast,slow}.csv, validation-{64,256}.csv; workloads/w1.csv."""
    app = root / "traces" / "net"
    app.mkdir(parents=True)
    for gpu_type, params in (("fast", FAST), ("slow", SLOW)):
        placements, scalability = _tables(params, LOCAL[gpu_type])
        placements.to_csv(app / f"placements-{gpu_type}.csv", index=False)
        scalability.to_csv(app / f"scalability-{gpu_type}.csv", index=False)
    for bsz, sqr in ((64, 2.0), (256, 1.0)):
        pd.DataFrame({"progress": [10.0, 20.0], "iteration": [1, 2], "metric": [0.5, 0.6], "grad_sqr": [sqr, 0.1],
                      "grad_var": [3.0, 0.2]}).to_csv(app / f"validation-{bsz}.csv", index=False)
    (root / "workloads").mkdir()
    pd.DataFrame({"name": ["net-0"], "time": [5], "application": ["cifar10"], "num_replicas": [2],
                  "batch_size": [128]}).to_csv(root / "workloads" / "w1.csv", index=False)
    return root


def test_each_gpu_type_gets_its_own_fit(tmp_path):
    net = read_application(write_artifact(tmp_path), "net")
    assert sorted(net.throughput) == ["fast", "slow"]
    assert all(err < 0.2 for err in net.fit_rmsle.values())  # the fit's priors keep it from exact
    for gpu_type, truth in (("fast", FAST), ("slow", SLOW)):  # the fit predicts the type's own step times
        fitted = step_time_s(net.throughput[gpu_type], 1, 1, 64)
        assert fitted == pytest.approx(step_time_s(truth, 1, 1, 64), rel=0.25)
    slow_s, fast_s = (float(step_time_s(net.throughput[t], 1, 1, 64)) for t in ("slow", "fast"))
    assert slow_s > 2 * fast_s


def test_the_validation_tables_give_the_batch_range_and_first_epoch_statistics(tmp_path):
    net = read_artifact(write_artifact(tmp_path))["net"]
    assert (net.grad_stats.sqr, net.grad_stats.var) == (2.0, 3.0)
    assert net.batch["fast"].init_bsz == net.batch["slow"].init_bsz == 64 and net.batch["fast"].max_bsz == 256
    assert (net.batch["fast"].max_local_bsz, net.batch["slow"].max_local_bsz) == (128, 64)
    profiles = net.profiles(max_epochs=30)
    assert {t: (p.gpu_type, p.params, p.batch, p.max_epochs) for t, p in profiles.items()} == {
        t: (t, net.throughput[t], net.batch[t], 30) for t in ("fast", "slow")}


def test_workloads_are_pollux_workloads(tmp_path):
    paths = workload_paths(write_artifact(tmp_path))
    assert list(paths) == ["w1"]
    assert list(load_workload(paths["w1"]).name) == ["net-0"]


@pytest.mark.parametrize("missing, match", [
    ("traces/net/scalability-slow.csv", r"missing .*scalability-slow\.csv"),
    ("traces/net/validation-64.csv", None),
    ("workloads/w1.csv", r"no workload CSV in .*workloads"),
])
def test_a_missing_file_is_named(tmp_path, missing, match):
    root = write_artifact(tmp_path)
    (root / missing).unlink()
    if match is None:  # the smallest validated batch is then 256
        assert read_application(root, "net").batch["slow"].init_bsz == 256
        for p in (root / "traces" / "net").glob("validation-*.csv"):
            p.unlink()
        match = r"no validation-<bsz>\.csv in .*net"
    with pytest.raises(ConfigError, match=match):
        read_application(root, "net") if "traces" in missing else workload_paths(root)


def test_a_root_without_traces_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"no folder .*traces"):
        read_artifact(tmp_path)
    (tmp_path / "traces" / "net").mkdir(parents=True)
    with pytest.raises(ConfigError, match=r"no placements-<type>\.csv in .*net"):
        read_artifact(tmp_path)
