#!/usr/bin/env bash
# Measure the calibration zoo on one CUDA GPU into schedlab/data/calibration/ tables:
#   experiments/calibrate_gpu.sh OUT_DIR PREFIX [PYTHON]
# One table per model (OUT_DIR/PREFIX-MODEL.csv), each in fp32 and bf16 mixed precision, batch
# sizes doubling up to the first that runs out of memory, then each frozen prefix of layer groups
# at the largest batch that fit; a model's run is capped (`timeout`) so one cannot starve the next.
# Multi-GPU rows come from the ring all-reduce model at H100 SXM bandwidths: NVLink 4 in a node
# (900 GB/s bidirectional per GPU; ~450 GB/s all-reduce bus bandwidth), 400 Gbit/s InfiniBand NDR
# per GPU across nodes (50 GB/s). OUT_DIR/env.txt records the GPU, driver and PyTorch.
set -u
out=${1:?OUT_DIR}; prefix=${2:?PREFIX}; py=${3:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'tf32 matmul', torch.backends.cuda.matmul.allow_tf32, 'tf32 conv', torch.backends.cudnn.allow_tf32)"
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

sizes() { "$py" -c "print(','.join(str(2 ** k) for k in range($1, $2 + 1)))"; }
measure() {  # model, first and last power of two of the batch sizes, seconds allowed
    timeout "$4" "$py" -m schedlab.cli calibrate --model "$1" --batch-sizes "$(sizes "$2" "$3")" --device cuda \
        --precision fp32,bf16 --frozen-groups --warmup 2 --steps 5 --intra-node-gbps 450 --inter-node-gbps 50 \
        --out "$out/$prefix-$1.csv" || echo "$1: exit $?"
}
measure resnet18 5 14 75
measure resnet50 3 12 110
measure bert-base 2 10 110
measure gpt2-small 0 9 110
measure ncf 8 21 60
