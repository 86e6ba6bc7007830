"""The shipped calibration data: the GPU tables answer every job of a replay world, and the H100's
speed per application (type_speeds) is what they say against the T4 tables. Needs no PyTorch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from schedlab.calibrate.table import ZOO_APPLICATIONS, measured_table, read_table
from schedlab.models.profiles import data_dir
from schedlab.models.type_speeds import speed_ratio


def test_shipped_gpu_tables_cover_every_job_of_a_16_node_cluster():
    frame = pd.concat([read_table(p) for p in sorted((data_dir() / "calibration").glob("h100-*.csv"))])
    assert set(frame.gpu_type) == {"NVIDIA-H100-80GB-HBM3"}
    assert set(zip(frame.model, frame.precision)) == {(m, p) for m in [*ZOO_APPLICATIONS, "gpt2-small"]
                                                      for p in ("fp32", "bf16")}
    for model in ZOO_APPLICATIONS:
        table = measured_table(frame, model, "bf16")
        bsz = float(frame[frame.model == model].local_bsz.min())
        for gpus_per_node in ((1,), (3,), (1, 1), (2, 3), (4, 4, 4, 3), (1,) * 16, (4,) * 16, (8, 8)):
            step, sync = table.step_sync_s(gpus_per_node, bsz)
            assert np.isfinite(step) and step >= sync >= 0


def test_the_h100_speeds_are_the_shipped_tables_against_the_t4s():
    path = Path(__file__).parents[1] / "experiments" / "gpu_calibration.py"
    spec = importlib.util.spec_from_file_location("gpu_calibration", path)
    experiment = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(experiment)
    ratios = experiment.speed_ratios(experiment.tables("h100"))
    for app, ratio in ratios.items():
        assert speed_ratio(app, "h100") == pytest.approx(ratio, abs=0.005)
    # the applications without a zoo model stand in as SOURCE.md says
    assert speed_ratio("yolov3", "h100") == speed_ratio("imagenet", "h100")
    assert speed_ratio("deepspeech2", "h100") == speed_ratio("bert", "h100")
