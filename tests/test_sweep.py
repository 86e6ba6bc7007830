"""Sweeps: resumable after a kill, the same on Dask, clear about bad configs, reported."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from schedlab.errors import ConfigError
from schedlab.sweep import CellStore, cell_key, parse_sweep, report, run_sweep, run_sweeps
from schedlab.sweep.run import deterministic, make_cell_policy

TINY = """\
[sweep]
name = "tiny"
baseline = "fifo"

[traces]
workloads = ["workload-1", "workload-3"]
synthetic = [{jobs = 12, jobs_per_hour = 30.0}]
max_jobs = 16

[grid]
policies = ["fifo", "tiresias"]
seeds = [0, 1]
round_s = 600.0
"""


def results(out: Path) -> dict[str, dict]:
    return {r["key"]: deterministic(r) for r in CellStore(out).records()}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("whole")
    records, failed = run_sweep(parse_sweep(TINY), out, workers=2, progress=False)
    assert len(records) == 12 and failed == []
    return out


def test_config_expands_to_the_full_grid_with_stable_keys():
    sweep = parse_sweep(TINY)
    assert len(sweep.cells) == 3 * 2 * 2
    assert len({cell_key(c) for c in sweep.cells}) == 12
    assert [cell_key(c) for c in parse_sweep(TINY).cells] == [cell_key(c) for c in sweep.cells]


def _sweep_until(tmp_path: Path, workers: int, cells: int) -> tuple[subprocess.Popen, list[str], Path]:
    """The tiny sweep started as its own session, once `cells` cells are stored (or 120 s)."""
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "schedlab.cli", "sweep", str(config), "--out", str(out), "--workers", str(workers),
           "--quiet"]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while len(CellStore(out).done()) < cells and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    return proc, cmd, out


def test_a_killed_sweep_resumes_to_exactly_the_uninterrupted_results(tmp_path, uninterrupted):
    proc, cmd, out = _sweep_until(tmp_path, workers=1, cells=3)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = CellStore(out).done()
    assert 3 <= len(partial) < 12, "the kill should land mid-sweep"
    assert not list((out / "cells").glob("*.error.json"))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert results(out) == results(uninterrupted)
    assert len(list((out / "cells").glob("*.json"))) == 12  # nothing stored twice


def test_rerunning_a_finished_sweep_runs_nothing(uninterrupted):
    before = {p.name: p.stat().st_mtime_ns for p in (uninterrupted / "cells").glob("*.json")}
    records, failed = run_sweep(parse_sweep(TINY), uninterrupted, progress=False)
    assert len(records) == 12 and failed == []
    assert {p.name: p.stat().st_mtime_ns for p in (uninterrupted / "cells").glob("*.json")} == before


def test_dask_local_cluster_gives_the_local_engine_results(tmp_path, uninterrupted):
    pytest.importorskip("dask.distributed")
    records, failed = run_sweep(parse_sweep(TINY), tmp_path, engine="dask", workers=2, progress=False)
    assert failed == [] and len(records) == 12
    assert results(tmp_path) == results(uninterrupted)


def test_sweeps_in_one_pool_give_each_folder_its_own_results(tmp_path, uninterrupted):
    # A second sweep sharing four cells with TINY (workload-1, both policies, seeds 0 and 1)
    # and adding two (seed 2): each folder ends as if swept alone; a shared cell runs once, its
    # one record (wall time included) stored in both folders.
    other = parse_sweep(TINY.replace('name = "tiny"', 'name = "other"')
                        .replace('workloads = ["workload-1", "workload-3"]', 'workloads = ["workload-1"]')
                        .replace('synthetic = [{jobs = 12, jobs_per_hour = 30.0}]\n', '')
                        .replace("seeds = [0, 1]", "seeds = [0, 1, 2]"))
    alone = tmp_path / "alone"
    assert len(run_sweep(other, alone, workers=2, progress=False)[0]) == 6
    (tiny_records, tiny_failed), (other_records, other_failed) = run_sweeps(
        [(parse_sweep(TINY), tmp_path / "tiny"), (other, tmp_path / "other")], workers=2, progress=False)
    assert len(tiny_records) == 12 and len(other_records) == 6 and tiny_failed == other_failed == []
    assert results(tmp_path / "tiny") == results(uninterrupted)
    assert results(tmp_path / "other") == results(alone)
    in_tiny = {r["key"]: r["wall_s"] for r in tiny_records}
    shared = {r["key"]: r["wall_s"] for r in other_records if r["key"] in in_tiny}
    assert len(shared) == 4 and all(in_tiny[k] == wall_s for k, wall_s in shared.items())


def test_a_failing_cell_is_recorded_and_the_sweep_goes_on(tmp_path):
    config = TINY.replace('workloads = ["workload-1", "workload-3"]', 'workloads = ["workload-1", "missing.csv"]')
    records, failed = run_sweep(parse_sweep(config), tmp_path, workers=2, progress=False)
    assert len(records) == 8 and len(failed) == 4
    assert all("missing.csv" in f["error"] for f in failed)
    assert len(list((tmp_path / "cells").glob("*.error.json"))) == 4


@pytest.mark.parametrize(("text", "key", "line"), [
    (TINY.replace("seeds = [0, 1]", "seeds = [0, 1]\nsed = 3"), "grid.sed", 13),
    (TINY.replace('baseline = "fifo"', 'basline = "fifo"'), "sweep.basline", 3),
    (TINY.replace("jobs_per_hour = 30.0", "job_per_hour = 30.0"), "job_per_hour", 7),
    (TINY.replace('"fifo", "tiresias"', '"fifo", "tiresia"'), "tiresia", 11),
    (TINY.replace("seeds = [0, 1]", "seeds = [0, -1]"), "grid.seeds", 12),
])
def test_a_malformed_config_names_the_key_and_its_line(text, key, line):
    with pytest.raises(ConfigError, match=rf"line {line}\b.*{key}"):
        parse_sweep(text, "tiny.toml")


def test_invalid_toml_names_the_line():
    with pytest.raises(ConfigError, match=r"not valid TOML.*line 3"):
        parse_sweep('[sweep]\nname = "x"\nbaseline = \n', "bad.toml")


def test_report_has_ci_over_seeds_and_change_vs_baseline(uninterrupted):
    text = report(uninterrupted, "md", figures=True)
    table, note = text.split("\n\n")
    lines = table.splitlines()
    assert [c.strip() for c in lines[0].split("|")[1:4]] == ["trace", "fifo: mean JCT (s)", "tiresias: mean JCT (s)"]
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["workload-1", "workload-3", "synthetic-12j-30ph", "all"]
    assert "±" in lines[4] and "%" in lines[2]  # sampled trace: a real CI; tiresias vs fifo in percent
    assert note.startswith("mean JCT (s): mean ± 95 % CI over seeds")
    for name in ("headline", "jct_cdf", "utilization", "solve_time"):
        assert (uninterrupted / "figures" / f"{name}.png").stat().st_size > 0
        assert (uninterrupted / "figures" / f"{name}.pdf").exists()
    assert not (uninterrupted / "figures" / "jct_vs_load.png").exists()  # one load: no curve to draw
    csv = report(uninterrupted, "csv")
    assert csv.splitlines()[0] == "trace,policy,mean,ci95,n,change_vs_baseline,metric"


def test_each_metric_has_its_unit_and_precision(uninterrupted):
    lines = report(uninterrupted, "md", metric="utilization").splitlines()
    assert "fifo: GPU utilization" in lines[0]
    assert all(re.fullmatch(r"0\.\d{3}( ± 0\.\d{3})?", cell.strip()) for cell in lines[2].split("|")[2:3])
    latex = report(uninterrupted, "latex", metric="makespan_s")
    assert "\\toprule" in latex and "makespan (h)" in latex and "{lrr" in latex


def test_report_warns_of_unfinished_cells_and_the_config_holds_the_overrides(tmp_path, uninterrupted, capsys):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(uninterrupted, out)
    sorted((out / "cells").glob("*.json"))[0].unlink()
    report(out)
    assert "1 of 12 cells" in capsys.readouterr().err
    sweep = parse_sweep(TINY, "tiny.toml", {"grid": {"policies": ["tiresias"]}, "sweep": {"baseline": "tiresias"}})
    assert parse_sweep(sweep.text).cells == sweep.cells  # what is stored beside the results is what ran


PAL_WORLD = """\
[sweep]
world = "pal"
baseline = "packed_sticky"
metric = "geomean_jct_s"

[traces]
sia_philly = ["workload-1"]
max_jobs = 25

[grid]
policies = ["packed_sticky", "pal", {name = "milp", time_limit_s = 0.05}]
across_node = [1.0, 1.7]
nodes = 4
"""


def test_pal_world_runs_any_policy_on_its_defaults_and_axes(tmp_path):
    sweep = parse_sweep(PAL_WORLD.replace('{name = "milp", time_limit_s = 0.05}', '"tiresias+pal", "joint"'))
    assert len(sweep.cells) == 8 and all(c["round_s"] == 360.0 and c["world"] == "pal" for c in sweep.cells)
    assert all(c["variability"] == "measured" and c["work"] == "iterations" for c in sweep.cells)
    records, failed = run_sweep(sweep, tmp_path, workers=2, progress=False)
    assert failed == [] and len(records) == 8
    by = {(r["cell"]["policy"]["label"], r["cell"]["across_node"]): r["summary"] for r in records}
    assert by[("packed_sticky", 1.7)]["mean_jct_s"] >= by[("packed_sticky", 1.0)]["mean_jct_s"]  # penalty slows
    text = report(tmp_path, "md")
    assert "across_node" in text.splitlines()[0] and "pal vs base" in text.splitlines()[0]


def test_policy_axes_reach_the_policies_that_have_them():
    sweep = parse_sweep(PAL_WORLD.replace("nodes = 4", "nodes = 4\nbackfill = [false, true]"))
    policies = {(c["policy"]["name"], c["backfill"]): make_cell_policy(c) for c in sweep.cells}
    assert policies[("pal", True)].backfill and not policies[("pal", False)].backfill


@pytest.mark.parametrize(("text", "message"), [
    (PAL_WORLD.replace('"pal", {name', '"best", {name'), "unknown policy 'best'"),
    (PAL_WORLD.replace('world = "pal"', 'world = "moon"'), "sweep.world 'moon'"),
    (PAL_WORLD.replace("nodes = 4", "nodes = 4\nvariability = \"raw\""), "grid.variability must be among"),
    (TINY.replace("seeds = [0, 1]", "seeds = [0, 1]\nacross_node = 0.5"), "grid.across_node must hold numbers >= 1"),
])
def test_world_and_axes_are_checked(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_sweep(text, "w.toml")


@pytest.mark.parametrize("damage", [lambda text: text[: len(text) // 2], lambda text: "", lambda text: "{}"])
def test_a_damaged_cell_is_reported_and_run_again(tmp_path, uninterrupted, damage):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(uninterrupted, out)
    victim = sorted((out / "cells").glob("*.json"))[0]
    victim.write_text(damage(victim.read_text()))
    with pytest.raises(ConfigError, match=f"not whole records .*{victim.name}.*schedlab sweep"):
        report(out)
    records, failed = run_sweep(parse_sweep(TINY), out, workers=1, progress=False)
    assert len(records) == 12 and failed == [] and CellStore(out).corrupt() == []
    assert results(out) == results(uninterrupted)
    assert report(out) == report(uninterrupted)


def test_a_killed_sweep_leaves_no_worker_behind(tmp_path):
    proc, _, _ = _sweep_until(tmp_path, workers=2, cells=1)
    os.kill(proc.pid, signal.SIGKILL)  # the driver only: its pool and forkserver must follow
    proc.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    pytest.fail("sweep workers outlived the killed driver by 15 s")


def test_a_remote_dask_scheduler_needs_tls_or_an_explicit_insecure(tmp_path):
    from schedlab.sweep.run import Remote

    with pytest.raises(ConfigError, match="runs pickled tasks from whoever answers there; use tls://"):
        Remote("tcp://10.0.0.5:8786").check()
    for ok in (Remote("tls://10.0.0.5:8786", tls_ca_file="ca.pem", tls_cert="c.pem"), Remote("tcp://127.0.0.1:8786"),
               Remote("tcp://10.0.0.5:8786", insecure=True)):
        ok.check()
    config = tmp_path / "tiny.toml"
    config.write_text(TINY)
    out = subprocess.run([sys.executable, "-m", "schedlab.cli", "sweep", str(config), "--out", str(tmp_path / "o"),
                          "--engine", "dask", "--address", "tcp://10.0.0.5:8786", "--quiet"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--insecure" in out.stderr and not (tmp_path / "o" / "cells").exists()


def test_tls_files_become_dask_security_that_requires_encryption():
    pytest.importorskip("dask.distributed")
    from schedlab.sweep.run import Remote

    security = Remote("tls://10.0.0.5:8786", tls_ca_file="ca.pem", tls_cert="c.pem", tls_key="k.pem").security()
    assert security.require_encryption and security.tls_ca_file == "ca.pem" and security.tls_client_key == "k.pem"


def test_a_cell_key_changes_with_the_package_source(monkeypatch):
    from schedlab.sweep import config

    cell = parse_sweep(TINY).cells[0]
    before = config.cell_key(cell)
    monkeypatch.setattr(config, "source_hash", lambda: "an edited formulation")
    assert config.cell_key(cell) != before


def test_a_worker_running_other_source_than_the_sweep_records_a_failure_saying_so(monkeypatch):
    # The code edited while a sweep runs: a worker's result would be stored under a key of its own
    # source, which the sweep never reads (an empty results frame); it is a failure instead.
    from schedlab.sweep import config, run

    cell = parse_sweep(TINY).cells[0]
    driver_key = config.cell_key(cell)
    monkeypatch.setattr(config, "source_hash", lambda: "an edited formulation")
    record = run.execute(cell, driver_key)
    assert record["key"] == driver_key and "source changed while the sweep ran" in record["error"]
