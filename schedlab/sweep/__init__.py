"""Experiments as data: a TOML grid of replays, run resumably (local processes or Dask), reported."""

from schedlab.sweep.config import Sweep, cell_key, load_sweep, parse_sweep
from schedlab.sweep.report import report
from schedlab.sweep.run import CellStore, execute, records_frame, results_frame, results_frames, run_sweep, run_sweeps

__all__ = ["CellStore", "Sweep", "cell_key", "execute", "load_sweep", "parse_sweep", "records_frame", "report",
           "results_frame", "results_frames", "run_sweep", "run_sweeps"]
