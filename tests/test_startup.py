"""Cheap start-up: importing schedlab and solving a round on the array path load none of the
heavy optional libraries (a fresh interpreter, so nothing else has loaded them)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "round-16x4.json"
HEAVY = ("pyomo.environ", "pandas", "scipy.stats", "scipy.optimize", "scipy.interpolate", "matplotlib", "sklearn",
         "ortools")


def _loaded_after(code: str, watched: tuple[str, ...] = HEAVY) -> list[str]:
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps([m for m in {watched!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_loads_no_heavy_library():
    assert _loaded_after("import schedlab") == []


def test_the_replay_entry_point_loads_on_its_first_use():
    assert _loaded_after("import schedlab\nassert 'replay' in dir(schedlab) and 'schedlab.replay_api' not in sys.modules") == []


@pytest.mark.parametrize("solver", ["highs", "portfolio"])
def test_a_round_on_the_array_path_loads_no_modelling_library(solver):
    loaded = _loaded_after(f"import schedlab, json\nr = schedlab.solve_round(json.loads(open({str(EXAMPLE)!r}).read()), "
                           f"solver={solver!r})\nassert r.verified")
    # portfolio races CP-SAT only when LP-first leaves the round unproven; this one it proves
    assert loaded == []


def test_a_pyomo_solver_still_loads_pyomo_when_asked():
    loaded = _loaded_after(f"import schedlab, json\nschedlab.solve_round(json.loads(open({str(EXAMPLE)!r}).read()), "
                           "solver='appsi_highs')")
    assert "pyomo.environ" in loaded


def test_help_and_version_load_no_round_machinery():
    loaded = _loaded_after("import schedlab.cli\nimport contextlib, io\nfor flag in ('--help', '--version'):\n"
                           "    with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
                           "        schedlab.cli.main([flag])")
    assert loaded == []
    assert _loaded_after("import schedlab.cli", ("numpy", "highspy", "scipy.sparse")) == []
