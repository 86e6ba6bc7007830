"""Output folders never escape their root and never overwrite each other: a sweep's name is a
plain folder name, a used folder takes only its own config (or --force), and a sweep, a replay
and a recording each keep out of the others' folders."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from schedlab.cli import main
from schedlab.errors import ConfigError
from schedlab.io.outputs import OUTPUT_KINDS, folder_kind
from schedlab.policies import make_policy
from schedlab.sim.engine import replay, write_outputs
from schedlab.sim.jobs import TraceJob
from schedlab.sim.world import WORLDS
from schedlab.sweep import parse_sweep, report, run_sweep
from schedlab.sweep import run as sweep_run

ONE = """\
[sweep]
name = "one"

[traces]
synthetic = [{jobs = 6, jobs_per_hour = 30.0}]

[grid]
policies = ["fifo"]
seeds = [0, 1]
round_s = 600.0
"""
TWO = ONE.replace('name = "one"', 'name = "two"').replace('["fifo"]', '["fifo", "tiresias"]')


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


@pytest.fixture
def computed(monkeypatch) -> list[int]:
    """How many cells each sweep computed (not reused from its folder)."""
    counts: list[int] = []
    local = sweep_run._local

    def counting(cells, workers, remote):
        counts.append(len(cells))
        return local(cells, workers, remote)

    monkeypatch.setattr(sweep_run, "_local", counting)
    return counts


def _sweep_folder(tmp_path: Path) -> Path:
    out = tmp_path / "swept"
    run_sweep(parse_sweep(ONE, "one.toml"), out, workers=1, progress=False)
    return out


def _replay_folder(tmp_path: Path) -> Path:
    out = tmp_path / "replayed"
    jobs = (TraceJob("a", "ncf", 0.0, 1, 32768), TraceJob("b", "cifar10", 0.0, 2, 128))
    write_outputs(replay(jobs, make_policy("fifo"), WORLDS["pollux"].with_options(num_nodes=1)), out)
    return out


def test_a_name_that_escapes_the_results_root_is_refused_and_nothing_is_written(tmp_path, monkeypatch, capsys):
    here = tmp_path / "a" / "b"
    here.mkdir(parents=True)
    (here / "escape.toml").write_text(ONE.replace('"one"', '"../../escaped-sweep"'))
    monkeypatch.chdir(here)
    assert main(["sweep", "escape.toml", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "escape.toml, line 2: sweep.name '../../escaped-sweep' holds a path separator" in err, err
    assert 'e.g. "load-study"' in err
    assert _files(tmp_path) == {"a", "a/b", "a/b/escape.toml"}  # no results/, no escaped-sweep/ anywhere


@pytest.mark.parametrize(("name", "problem"), [
    ("", "is empty"),
    ("/tmp/sweeps", "is an absolute path"),
    ("\\server\\share", "is an absolute path"),
    ("runs/one", "holds a path separator"),
    ("..\\one", "holds a path separator"),
    ("..", "is only dots"),
    (".", "is only dots"),
    ("...", "is only dots"),
    ("load study", "holds characters other than ASCII letters, digits, -, _ and ."),
    ("résumé", "holds characters other than ASCII letters, digits, -, _ and ."),
    ("one\n", "holds characters other than ASCII letters, digits, -, _ and ."),
])
def test_each_name_that_is_no_plain_folder_name_is_refused_with_the_fix(name, problem):
    text = ONE.replace('"one"', json.dumps(name))
    with pytest.raises(ConfigError, match=re.escape(f"w.toml, line 2: sweep.name {name!r} {problem}; name the sweep")):
        parse_sweep(text, "w.toml")


@pytest.mark.parametrize("name", ["load-study", "v1.2_final", ".hidden", "A9"])
def test_plain_names_are_taken(name):
    assert parse_sweep(ONE.replace('"one"', json.dumps(name))).name == name


def test_a_nameless_config_is_named_after_its_file():
    assert parse_sweep(ONE.replace('name = "one"\n', ""), "configs/load-study.toml").name == "load-study"


def test_another_config_into_a_used_folder_is_refused_naming_both_unless_forced(tmp_path, computed, capsys):
    out = tmp_path / "out"
    run_sweep(parse_sweep(ONE, "one.toml"), out, workers=1, progress=False)
    report(out)
    before = {name: (out / name).read_text() for name in ("sweep.toml", "table.md")}
    (tmp_path / "two.toml").write_text(TWO)
    with pytest.raises(ConfigError) as err:
        run_sweep(parse_sweep(TWO, str(tmp_path / "two.toml")), out, workers=1, progress=False)
    message = str(err.value)
    assert f"{out}/sweep.toml (sweep 'one', 2 cells; 2 shared with the new one) is not {tmp_path}/two.toml " \
           "(sweep 'two', 4 cells)" in message and "--force" in message, message
    assert {name: (out / name).read_text() for name in before} == before  # the table and its config kept
    assert main(["sweep", str(tmp_path / "two.toml"), "--out", str(out), "--quiet"]) == 2
    assert "holds another sweep config's results" in capsys.readouterr().err
    assert computed == [2]

    assert main(["sweep", str(tmp_path / "two.toml"), "--out", str(out), "--force", "--quiet"]) == 0
    assert (out / "sweep.toml").read_text() == TWO
    assert computed == [2, 2]  # only tiresias's cells: fifo's are reused
    assert len(list((out / "cells").glob("*.json"))) == 4


def test_the_same_config_resumes_and_reuses_its_cells(tmp_path, computed):
    out = tmp_path / "out"
    records, _ = run_sweep(parse_sweep(ONE, "one.toml"), out, workers=1, progress=False)
    stored = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    (out / "cells" / next(iter(stored))).unlink()
    again, failed = run_sweep(parse_sweep(ONE, "one.toml"), out, workers=1, progress=False)
    assert computed == [2, 1] and failed == [] and len(again) == 2
    reworded = "# the same grid, its comments changed\n" + ONE.replace("seeds = [0, 1]", "seeds = [0, 1]  # two")
    last, _ = run_sweep(parse_sweep(reworded, "elsewhere/one.toml"), out, workers=1, progress=False)
    assert computed == [2, 1, 0] and last == again
    assert (out / "sweep.toml").read_text() == reworded  # the config that ran last


def test_a_replay_keeps_out_of_a_sweeps_folder(tmp_path, capsys):
    out = _sweep_folder(tmp_path)
    before = _files(out)
    assert main(["replay", "--workload", "workload-1", "--policy", "fifo", "--out", str(out), "--quiet"]) == 2
    assert f"--out {out}: is a sweep's output folder (it holds sweep.toml)" in capsys.readouterr().err
    assert _files(out) == before


def test_a_sweep_keeps_out_of_a_replays_folder_even_forced(tmp_path, capsys):
    out = _replay_folder(tmp_path)
    before = _files(out)
    assert folder_kind(out) is OUTPUT_KINDS["replay"]
    with pytest.raises(ConfigError, match=re.escape(f"--out {out}: is a replay's output folder (it holds summary.json)")):
        run_sweep(parse_sweep(ONE), out, progress=False, force=True)
    with pytest.raises(ConfigError, match="is a replay's output folder, not a sweep's"):
        report(out)
    assert _files(out) == before
    write_outputs(replay((TraceJob("c", "ncf", 0.0, 1, 32768),), make_policy("fifo")), out)  # a replay's own: taken
    assert _files(out) == before


def test_a_folder_of_other_files_takes_neither_kind(tmp_path, capsys):
    out = tmp_path / "notes"
    out.mkdir()
    (out / "plan.txt").write_text("mine")
    with pytest.raises(ConfigError, match="holds other files and is no sweep's output folder .no sweep.toml."):
        run_sweep(parse_sweep(ONE), out, progress=False)
    assert main(["replay", "--workload", "workload-1", "--policy", "fifo", "--out", str(out), "--quiet"]) == 2
    assert "holds other files and is no replay's output folder" in capsys.readouterr().err
    assert _files(out) == {"plan.txt"}


def test_a_recording_writes_no_folder_and_no_file_of_one(tmp_path, capsys):
    out = _sweep_folder(tmp_path)
    stored = (out / "sweep.toml").read_text()
    assert main(["record", "--workload", "workload-1", "--rounds", "1", "--out", str(out / "sweep.toml")]) == 2
    assert "is the sweep.toml of a sweep's output folder" in capsys.readouterr().err
    assert main(["record", "--workload", "workload-1", "--rounds", "1", "--out", str(out)]) == 2
    assert f"--out {out}: is a folder; give the file to write" in capsys.readouterr().err
    assert (out / "sweep.toml").read_text() == stored
