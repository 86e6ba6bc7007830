"""The calibrate command: measure models with PyTorch into a throughput table, or fit one."""

from __future__ import annotations

import argparse
import sys

from schedlab.cli.common import COUNT, fail, number

__all__ = ["calibrate_arguments", "cmd_calibrate"]


def calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    """What to measure and on which device, the all-reduce model, or a table to fit."""
    parser.add_argument("--model", action="append", help="zoo model (repeatable): resnet18, resnet50, bert-base, "
                        "gpt2-small, ncf, tiny-mlp")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32,64,128", help="local batch sizes, comma-separated")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    parser.add_argument("--warmup", type=number(int, 0), default=3)
    parser.add_argument("--steps", type=COUNT, default=10, help="timed steps per batch size (the median is kept)")
    parser.add_argument("--frozen-groups", action="store_true", help="also time each frozen prefix of layer groups")
    parser.add_argument("--precision", default="fp32", help="comma-separated: fp32 (float32 training), bf16 (mixed "
                        "precision: autocast to bfloat16); each model is measured in each")
    gbps = number(float, 0.0, 1e6, low_open=True)
    parser.add_argument("--intra-node-gbps", type=gbps, default=130.0, help="all-reduce bandwidth inside a node (GB/s)")
    parser.add_argument("--inter-node-gbps", type=gbps, default=3.125, help="all-reduce bandwidth across nodes (GB/s)")
    parser.add_argument("--latency-us", type=number(float, 0.0, 1e9), default=10.0, help="all-reduce latency per ring hop (us)")
    parser.add_argument("--out", default=None, help="table CSV to write, e.g. data/calibration/NAME.csv")
    parser.add_argument("--fit", default=None, help="fit Pollux's model to this table and report the RMSLE")
    parser.add_argument("--json", action="store_true", help="with --fit: one JSON object of fitted throughput_params")


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure models into a throughput table, or fit one (--fit)."""
    from schedlab.calibrate.table import AllReduceModel, fit_table, read_table, table_frame, write_table
    from schedlab.io import json_text

    if args.fit:
        try:
            fits = fit_table(read_table(args.fit))
        except (OSError, ValueError) as exc:
            return fail(f"--fit {args.fit}: {exc}")
        if not args.json:
            for f in fits:
                print(f"{f.model:12s} {f.gpu_type:24s} {f.precision:5s} points {f.points:3d}  step-time RMSLE {f.rmsle:.4f}")
        else:
            print(json_text({f"{f.model}/{f.precision}": {
                "model": f.model, "precision": f.precision, "gpu_type": f.gpu_type, "rmsle": f.rmsle, "points": f.points,
                "throughput_params": {f.gpu_type: f.params.__dict__}} for f in fits}))
        return 0
    if not args.model or not args.out:
        return fail("calibrate needs --model (one or more) and --out, or --fit TABLE.csv")
    try:
        from schedlab.calibrate.harness import PRECISIONS, measure
        from schedlab.calibrate.zoo import build
    except ImportError as exc:
        return fail(f"calibrate needs PyTorch ({exc.name} missing): pip install 'schedlab[calibrate]'")
    try:
        sizes = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        return fail(f"--batch-sizes must be comma-separated integers, got {args.batch_sizes!r}")
    precisions = args.precision.split(",")
    if unknown := [p for p in precisions if p not in PRECISIONS]:
        return fail(f"--precision {unknown[0]!r}: use one or more of {', '.join(PRECISIONS)}, comma-separated")
    if args.device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            return fail("--device cuda: no CUDA device is visible; use --device cpu")
    allreduce = AllReduceModel(args.intra_node_gbps, args.inter_node_gbps, args.latency_us * 1e-6)
    measurements = []
    for name in args.model:
        try:
            model = build(name)
        except KeyError as exc:
            return fail(str(exc.args[0]))
        for precision in precisions:
            got = measure(model, sizes, args.device, args.warmup, args.steps, frozen_groups=args.frozen_groups,
                          precision=precision)
            for m in got:
                print(f"{m.model:12s} {m.precision} bsz {m.local_bsz:6d} frozen {m.frozen_groups}  "
                      f"step {m.step_time * 1e3:9.2f} ms  {m.samples_per_s:9.1f} samples/s", file=sys.stderr, flush=True)
            measurements += got
            path = write_table(table_frame(measurements, allreduce), args.out)  # kept if a later model fails
    print(f"wrote {path} ({len(measurements)} measurements)")
    return 0
