"""The shipped GPU calibration tables: their fit, public figures, the freezing model, a replay.

Reads schedlab/data/calibration/<prefix>-*.csv (measured by experiments/calibrate_gpu.sh on one
GPU; SOURCE.md beside them says where and how) and prints
1. the step-time RMSLE of Pollux's throughput model per model and precision (`schedlab
   calibrate --fit`), over every unfrozen row of the table;
2. samples/s at the largest batch that fit, beside Lambda's published mixed-precision figures
   for the H100 SXM (ResNet-50 2,616 img/s, BERT-base SQuAD 812 seq/s; ../docs reference 7);
3. the frozen-prefix check: step time with the first k layer groups frozen over the full step,
   measured against models.freezing's prediction c_k (backward = 2x forward, 1x for the first
   group and embedding lookups), for the zoo models that stand for a Pollux application;
4. the 8 Pollux workloads under pollux and tiresias in the Pollux world, once with the shipped
   T4 tables and once with the GPU tables (in `--precision`) as the ground truth of cifar10,
   imagenet, bert and ncf; deepspeech2 and yolov3 have no zoo model and keep their T4 tables;
5. each application's speed on the GPU relative to the T4 (the `h100` column of
   schedlab/data/type_speeds/speeds.csv): the geometric mean, over the T4 table's one-GPU local
   batches inside the GPU table's range, of the T4's step time over the GPU's (fp32, interpolated
   log-log), for the four zoo-backed applications;
6. the same workloads under pollux, tiresias and sia on a mixed cluster of the same 64 GPUs, 12
   nodes of 4 T4s and 4 of 4 H100s (`--cluster t4:12x4,h100:4x4`: a quarter upgraded; the
   largest job, 48 GPUs, still fits on one type, which tiresias needs), every H100 derived from
   the T4 tables by 5.
Ends with one JSON line (--json).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

import schedlab
from schedlab.calibrate.table import ZOO_APPLICATIONS, fit_table, measured_table, read_table
from schedlab.io import json_text
from schedlab.models.freezing import compute_scale, layer_profile
from schedlab.models.profiles import data_dir
from schedlab.models.profiles import measured_table as t4_table

LAMBDA_H100_SXM = {"resnet50": 2616.0, "bert-base": 812.0}  # mixed precision, samples/s on one GPU
WORKLOADS = tuple(f"workload-{k}" for k in range(1, 9))
POLICIES = ("pollux", "tiresias")
MIXED_CLUSTER, MIXED_POLICIES = "t4:12x4,h100:4x4", ("pollux", "tiresias", "sia")


def tables(prefix: str) -> pd.DataFrame:
    """Every shipped table of one GPU, concatenated."""
    paths = sorted((data_dir() / "calibration").glob(f"{prefix}-*.csv"))
    if not paths:
        raise SystemExit(f"no tables {prefix}-*.csv in {data_dir() / 'calibration'}")
    return pd.concat([read_table(p) for p in paths], ignore_index=True)


def fits(frame: pd.DataFrame) -> pd.DataFrame:
    """Step-time RMSLE per model (rows) and precision (columns)."""
    rows = [{"model": f.model, "precision": f.precision, "rmsle": f.rmsle} for f in fit_table(frame)]
    return pd.DataFrame(rows).pivot(index="model", columns="precision", values="rmsle")


def _one_gpu(frame: pd.DataFrame) -> pd.DataFrame:
    """The measured rows of full steps: one GPU, nothing frozen."""
    return frame[(frame.placement == "1") & (frame.frozen_groups == 0)]


def peak_throughput(frame: pd.DataFrame) -> pd.DataFrame:
    """Samples/s and local batch at the largest batch measured, per model and precision, with
    Lambda's figure where it has one."""
    one = _one_gpu(frame)
    largest = one.loc[one.groupby(["model", "precision"]).local_bsz.idxmax()]
    out = largest.set_index(["model", "precision"])[["local_bsz", "samples_per_s"]]
    out["lambda_mixed"] = [LAMBDA_H100_SXM.get(model, np.nan) for model, _ in out.index]
    out["vs_lambda"] = out.samples_per_s / out.lambda_mixed - 1
    return out


def freezing_check(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured step(k frozen) / step(0) at the frozen rows' batch, and c_k predicted."""
    one = frame[frame.placement == "1"]
    rows = []
    for (model, precision), df in one[one.model.isin(list(ZOO_APPLICATIONS))].groupby(["model", "precision"]):
        frozen = df[df.frozen_groups > 0]
        if frozen.empty:
            continue
        bsz = int(frozen.local_bsz.iloc[0])
        full = float(df[(df.frozen_groups == 0) & (df.local_bsz == bsz)].step_time.iloc[0])
        groups = layer_profile(ZOO_APPLICATIONS[model])
        for k, step in zip(frozen.frozen_groups, frozen.step_time):
            rows.append({"model": model, "precision": precision, "local_bsz": bsz, "frozen": int(k),
                         "measured": step / full, "predicted": compute_scale(groups, int(k))})
    out = pd.DataFrame(rows)
    out["error"] = out.measured - out.predicted
    return out


def replays(frame: pd.DataFrame, precision: str) -> pd.DataFrame:
    """Mean JCT per workload and policy, with the T4 tables and with the GPU's as ground truth."""
    calibration = tuple((app, measured_table(frame, model, precision)) for model, app in ZOO_APPLICATIONS.items())
    rows = []
    for truth, options in (("t4", {}), ("gpu", {"calibration": calibration})):
        for policy in POLICIES:
            for workload in WORKLOADS:
                summary = schedlab.replay(workload, policy, **options).summary
                rows.append({"truth": truth, "policy": policy, "workload": workload, "mean_jct_s": summary["mean_jct_s"]})
    return pd.DataFrame(rows)


def speed_ratios(frame: pd.DataFrame, precision: str = "fp32") -> pd.Series:
    """Each zoo-backed application's T4 step time over the GPU's (item 5 of the module docstring)."""
    one = _one_gpu(frame)
    one = one[one.precision == precision]
    out = {}
    for model, app in ZOO_APPLICATIONS.items():
        gpu = one[one.model == model].sort_values("local_bsz")
        t4 = t4_table(app).placements
        t4 = t4[t4.placement.astype(str) == "1"]
        bsz = t4.local_bsz.to_numpy(float)
        inside = (bsz >= gpu.local_bsz.min()) & (bsz <= gpu.local_bsz.max())
        gpu_s = np.exp(np.interp(np.log(bsz[inside]), np.log(gpu.local_bsz.to_numpy(float)), np.log(gpu.step_time.to_numpy())))
        out[app] = float(np.exp(np.mean(np.log(t4.step_time.to_numpy()[inside] / gpu_s))))
    return pd.Series(out, name="speed_vs_t4")


def mixed_replays() -> pd.DataFrame:
    """Mean JCT per workload and policy on the mixed T4 + H100 cluster (item 6)."""
    rows = [{"policy": policy, "workload": workload,
             "mean_jct_s": schedlab.replay(workload, policy, cluster=MIXED_CLUSTER).summary["mean_jct_s"]}
            for policy in MIXED_POLICIES for workload in WORKLOADS]
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    """Print the six tables; with --json end with one JSON line of their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prefix", default="h100", help="the tables' file prefix in schedlab/data/calibration")
    parser.add_argument("--precision", default="bf16", help="the tables' precision the replay takes as ground truth")
    parser.add_argument("--out", default=None, help="folder for the tables as CSV")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    frame = tables(args.prefix)
    rmsle, peak, frozen = fits(frame), peak_throughput(frame), freezing_check(frame)
    jct = replays(frame, args.precision)
    means = jct.groupby(["truth", "policy"]).mean_jct_s.mean().unstack("truth")
    ratios, mixed = speed_ratios(frame), mixed_replays()
    mixed_means = mixed.groupby("policy").mean_jct_s.mean()
    for title, table in (("step-time RMSLE of Pollux's model", rmsle), ("samples/s at the largest batch", peak),
                         ("frozen step time / full step time", frozen.set_index(["model", "precision", "frozen"])),
                         ("mean JCT (s), 8 Pollux workloads", jct.pivot(index="workload", columns=["truth", "policy"],
                                                                        values="mean_jct_s"))):
        print(f"\n{title}\n{table.round(4).to_markdown()}")
    print(f"\nmean over the workloads\n{means.round(0).to_markdown()}")
    print(f"\nspeed relative to the T4 (fp32)\n{ratios.round(2).to_markdown()}")
    by_workload = mixed.pivot(index="workload", columns="policy", values="mean_jct_s")
    print(f"\nmean JCT (s), {MIXED_CLUSTER}\n{by_workload.round(0).to_markdown()}")
    print(f"\nmean over the workloads, {MIXED_CLUSTER}\n{mixed_means.round(0).to_markdown()}")
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, table in (("rmsle", rmsle), ("peak", peak), ("freezing", frozen), ("replays", jct),
                            ("speed_ratios", ratios), ("mixed_replays", mixed)):
            table.to_csv(out / f"{name}.csv")
    if args.json:
        print(json_text({
            "gpu_type": str(frame.gpu_type.iloc[0]),
            "rmsle": {f"{m}/{p}": float(v) for (m, p), v in rmsle.stack().items()},
            "samples_per_s": {f"{m}/{p}": float(v) for (m, p), v in peak.samples_per_s.items()},
            "freezing_max_abs_error": {f"{m}/{p}": float(g.error.abs().max())
                                       for (m, p), g in frozen.groupby(["model", "precision"])},
            "mean_jct_s": {f"{policy}/{truth}": float(v) for policy, row in means.iterrows() for truth, v in row.items()},
            "replay_precision": args.precision,
            "speed_vs_t4": ratios.round(4).to_dict(),
            "mixed_mean_jct_s": {policy: float(v) for policy, v in mixed_means.items()},
            "mixed_cluster": MIXED_CLUSTER,
            "wall_s": time.perf_counter() - t0,
        }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
