r"""Layer freezing: per-application layer-group profiles, frozen step time, and our penalty model.

IceFrog (TPDS 2025) schedules on "layer-aware throughput x (1 - frozen penalty)"; its penalty
formula and code are not public. Everything below is ours, built from published facts
(../docs: reference section 5) and stated as such.

Layer groups. Each application's network is cut into 4-6 contiguous groups, input first; the
per-example forward cost (multiply-accumulates) and parameter count of every group is derived
here from the architecture itself (layer shapes, input size), not copied from a table:
    cifar10      ResNet-18, CIFAR variant (He et al., CVPR'16; the kuangliu/pytorch-cifar
                 definition the AdaptDL example trains), 32x32 input
    imagenet     ResNet-50 (He et al., CVPR'16, Table 1), 224x224 input
    bert         BERT-base (Devlin et al., NAACL'19: 12 layers, d = 768, d_ff = 3072,
                 vocab 30,522), SQuAD fine-tuning at sequence length 384
    deepspeech2  DeepSpeech2 as in deepspeech.pytorch (Amodei et al., ICML'16: 2 conv layers
                 41x11 and 21x11 with 32 channels, 5 bidirectional LSTMs of 1,024), 161
                 spectrogram bins, 10 s of audio at 100 frames/s
    yolov3       YOLOv3 (Redmon & Farhadi, 2018: Darknet-53 with 1, 2, 8, 8, 4 residual blocks,
                 three detection heads, 255 outputs each), 416x416 input
    ncf          NeuMF (He et al., WWW'17: GMF factor 8, MLP 64-32-16-8) on MovieLens-1M
                 (6,040 users, 3,706 items)
Backward cost is 2x forward (gradients w.r.t. inputs and weights), 1x for the first group
(its input needs no gradient) and for embedding lookups (a sparse scatter).

Frozen step time. Freezing the first k groups skips their backward pass and their gradient
all-reduce. In Pollux's model (models.throughput) the compute part scales by
    c_k = (sum_i F_i + sum_{i>k} B_i) / sum_i (F_i + B_i)
and the sync part by the remaining parameter share
    s_k = sum_{i>k} P_i / sum_i P_i,
i.e. alpha_c, beta_c scale by c_k and the four sync parameters by s_k (scaled_params, with
c_k and s_k from level_scales).

Penalty (ours). With phi_k = sum_{i<=k} B_i / sum_i B_i the frozen share of backward compute and
q in [0, 1] the job's training progress, a frozen step is worth 1 - pi of a full one:
    pi(phi, q) = 1 - exp(-scale * phi^exponent * (1 - q)^decay)
monotone in phi, decreasing in q (freezing early costs more: PipeTransformer and AutoFreeze
freeze progressively for that reason), and below 1. The job's accuracy penalty is the
progress-weighted total P = integral of pi dq, which its budget bounds.
Defaults (exponent 3, decay 2, scale 14.4) are fitted to FreezeOut's numbers (Brock et al.,
2017): a schedule that freezes linearly over training (phi = phi_max * q, FreezeOut's linear
schedule) on a compute-bound network with backward = 2 forward is ~20 % faster at
phi_max = 0.5, and P = scale * phi_max^3 * B(4, 3) = 3 % there; at ~10 % speedup
(phi_max = 0.27) P = 0.5 %, i.e. "~10 % is free". The exponent 3 is what makes 10 % nearly
free while 20 % costs 3 % (P grows ~ (speedup)^3). A default budget of 3 % follows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from schedlab.state import FreezePenalty, FreezeSpec, LayerGroup, ThroughputParams

__all__ = ["DEFAULT_BUDGET", "PROFILES", "bert_base", "compute_scale", "deepspeech2", "frozen_fraction",
           "frozen_step_sync_s", "geometric_frozen_groups", "layer_profile", "level_penalties", "level_scales",
           "linear_schedule_speedup_and_penalty", "ncf", "penalty", "resnet18_cifar", "resnet50", "scaled_params",
           "sync_scale", "yolov3"]

DEFAULT_BUDGET = 0.03  # FreezeOut: <= 3 % relative error is the accepted price of ~20 % speedup


@dataclass(frozen=True)
class _Layer:
    macs: float  # per example
    params: float
    backward_ratio: float = 2.0


def _conv(c_in: int, c_out: int, k: int, out_hw: int, bias: bool = False) -> _Layer:
    """A k x k convolution producing an out_hw x out_hw map (batch-norm parameters included)."""
    weights = k * k * c_in * c_out
    return _Layer(macs=weights * out_hw * out_hw, params=weights + (c_out if bias else 2 * c_out))


def _linear(d_in: int, d_out: int, per_example: float = 1.0) -> _Layer:
    return _Layer(macs=d_in * d_out * per_example, params=d_in * d_out + d_out)


def _embedding(rows: int, dim: int, lookups: float) -> _Layer:
    return _Layer(macs=dim * lookups, params=rows * dim, backward_ratio=1.0)


def _group(name: str, layers: list[_Layer], first: bool = False) -> LayerGroup:
    fwd = sum(layer.macs for layer in layers)
    bwd = sum(layer.macs * layer.backward_ratio for layer in layers)
    if first:  # the network's input needs no gradient: the first layer computes weight grads only
        bwd -= layers[0].macs * (layers[0].backward_ratio - 1.0)
    return LayerGroup(name, float(fwd), float(bwd), float(sum(layer.params for layer in layers)))


def _basic_block(c_in: int, c_out: int, hw: int) -> list[_Layer]:
    layers = [_conv(c_in, c_out, 3, hw), _conv(c_out, c_out, 3, hw)]
    return layers + ([_conv(c_in, c_out, 1, hw)] if c_in != c_out else [])


def _bottleneck(c_in: int, width: int, hw: int) -> list[_Layer]:
    layers = [_conv(c_in, width, 1, hw), _conv(width, width, 3, hw), _conv(width, 4 * width, 1, hw)]
    return layers + ([_conv(c_in, 4 * width, 1, hw)] if c_in != 4 * width else [])


def resnet18_cifar() -> tuple[LayerGroup, ...]:
    """ResNet-18, CIFAR variant (32x32 input, 10 classes), in 4 groups: stem+layer1, layer2, layer3, layer4+fc."""
    stem = [_conv(3, 64, 3, 32)]
    stages, c_in = [], 64
    for width, hw in ((64, 32), (128, 16), (256, 8), (512, 4)):
        stages.append(_basic_block(c_in, width, hw) + _basic_block(width, width, hw))
        c_in = width
    return (_group("stem+layer1", stem + stages[0], first=True), _group("layer2", stages[1]),
            _group("layer3", stages[2]), _group("layer4+fc", stages[3] + [_linear(512, 10)]))


def resnet50() -> tuple[LayerGroup, ...]:
    """ResNet-50 (224x224 input, 1,000 classes), in 4 groups: stem+layer1, layer2, layer3, layer4+fc."""
    stem = [_conv(3, 64, 7, 112)]
    stages, c_in = [], 64
    for width, blocks, hw in ((64, 3, 56), (128, 4, 28), (256, 6, 14), (512, 3, 7)):
        layers = []
        for _ in range(blocks):
            layers += _bottleneck(c_in, width, hw)
            c_in = 4 * width
        stages.append(layers)
    return (_group("stem+layer1", stem + stages[0], first=True), _group("layer2", stages[1]),
            _group("layer3", stages[2]), _group("layer4+fc", stages[3] + [_linear(2048, 1000)]))


def bert_base(seq_len: int = 384) -> tuple[LayerGroup, ...]:
    """BERT-base for SQuAD at `seq_len` tokens, in 5 groups: the embeddings, then the encoder
    layers three at a time (the span head with the last three)."""
    d, d_ff, vocab = 768, 3072, 30522
    embed = _embedding(vocab + 512 + 2, d, lookups=3 * seq_len)
    attention_macs = 2 * seq_len * d * seq_len  # QK^T and the weighted sum of V
    encoder = _Layer(macs=seq_len * (4 * d * d + 2 * d * d_ff) + attention_macs,
                     params=4 * (d * d + d) + 2 * d * d_ff + d + d_ff + 4 * d)
    head = _linear(d, 2, per_example=seq_len)
    return (_group("embeddings", [embed], first=True),) + tuple(
        _group(f"encoder{3 * i + 1}-{3 * i + 3}", [encoder] * 3 + ([head] if i == 3 else [])) for i in range(4))


def deepspeech2(frames: int = 1000) -> tuple[LayerGroup, ...]:
    """DeepSpeech2 on `frames` spectrogram frames (100 per second of audio), in 6 groups: the two
    convolutions, then one per bidirectional LSTM (the output layer with the last)."""
    t = frames // 2  # the first convolution strides 2 in time, the second 1
    conv1 = _Layer(macs=41 * 11 * 1 * 32 * 81 * t, params=41 * 11 * 32 + 2 * 32)
    conv2 = _Layer(macs=21 * 11 * 32 * 32 * 41 * t, params=21 * 11 * 32 * 32 + 2 * 32)
    hidden = 1024

    def lstm(d_in: int) -> _Layer:
        weights = 2 * 4 * (d_in * hidden + hidden * hidden)  # two directions, four gates
        return _Layer(macs=weights * t, params=weights + 2 * 8 * hidden)

    rnns = [lstm(32 * 41)] + [lstm(hidden) for _ in range(4)]
    fc = _linear(hidden, 29, per_example=t)
    return (_group("conv", [conv1, conv2], first=True), _group("lstm1", [rnns[0]]), _group("lstm2", [rnns[1]]),
            _group("lstm3", [rnns[2]]), _group("lstm4", [rnns[3]]), _group("lstm5+fc", [rnns[4], fc]))


def yolov3(size: int = 416) -> tuple[LayerGroup, ...]:
    """YOLOv3 at `size` x `size` input, in 5 groups: the stem with Darknet-53's stages 1-2,
    stages 3, 4 and 5, and the three detection heads."""
    hw = size
    stem = [_conv(3, 32, 3, hw)]
    stages, c_in = [], 32
    for c_out, blocks in ((64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)):
        hw //= 2
        layers = [_conv(c_in, c_out, 3, hw)]
        for _ in range(blocks):
            layers += [_conv(c_out, c_out // 2, 1, hw), _conv(c_out // 2, c_out, 3, hw)]
        stages.append(layers)
        c_in = c_out

    def head(c_in: int, c: int, hw: int) -> list[_Layer]:
        convs = [_conv(c_in, c, 1, hw), _conv(c, 2 * c, 3, hw), _conv(2 * c, c, 1, hw), _conv(c, 2 * c, 3, hw),
                 _conv(2 * c, c, 1, hw)]
        return convs + [_conv(c, 2 * c, 3, hw), _conv(2 * c, 255, 1, hw, bias=True)]

    s = size // 32
    heads = (head(1024, 512, s) + [_conv(512, 256, 1, s)] + head(256 + 512, 256, 2 * s)
             + [_conv(256, 128, 1, 2 * s)] + head(128 + 256, 128, 4 * s))
    return (_group("stem+stage1-2", stem + stages[0] + stages[1], first=True), _group("stage3", stages[2]),
            _group("stage4", stages[3]), _group("stage5", stages[4]), _group("heads", heads))


def ncf(users: int = 6040, items: int = 3706) -> tuple[LayerGroup, ...]:
    """NeuMF for `users` x `items` (MovieLens-1M's by default), in 3 groups: the GMF and MLP
    embeddings, the MLP tower, the prediction layer."""
    embeds = [_embedding(users + items, 8, lookups=2), _embedding(users + items, 32, lookups=2)]
    mlp = [_linear(64, 32), _linear(32, 16), _linear(16, 8)]
    return (_group("embeddings", embeds, first=True), _group("mlp", mlp), _group("predict", [_linear(16, 1)]))


PROFILES = {"cifar10": resnet18_cifar, "imagenet": resnet50, "bert": bert_base, "deepspeech2": deepspeech2,
            "yolov3": yolov3, "ncf": ncf}


@cache
def layer_profile(application: str) -> tuple[LayerGroup, ...]:
    """The layer groups of a shipped application (KeyError names the known ones)."""
    if application not in PROFILES:
        raise KeyError(f"no layer profile for {application!r}; known: {', '.join(sorted(PROFILES))}")
    return PROFILES[application]()


@cache
def level_scales(groups: tuple[LayerGroup, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(c_k, s_k, phi_k) for k = 0..len(groups), with the first k groups frozen.

    c_k, the share of compute time left; s_k, the share of parameters still all-reduced; phi_k,
    the share of backward compute frozen (formulas in the module docstring). Arrays of
    len(groups) + 1 entries; the last level freezes everything and is never allowed.

    Examples
    --------
    Freezing ResNet-18's first group (stem and layer1) saves 18 % of the compute but only 1.3 %
    of the all-reduce: early layers hold few parameters, late ones most of them:

    >>> c, s, phi = level_scales(layer_profile("cifar10"))
    >>> for name, share in (("c", c), ("s", s), ("phi", phi)):
    ...     print(name, " ".join(f"{x:.3f}" for x in share))
    c 1.000 0.818 0.656 0.495 0.334
    s 1.000 0.987 0.940 0.752 0.000
    phi 0.000 0.274 0.516 0.758 1.000
    """
    f = np.array([g.forward for g in groups])
    b = np.array([g.backward for g in groups])
    p = np.array([g.params for g in groups])
    b_left = np.concatenate([np.cumsum(b[::-1])[::-1], [0.0]])  # sum_{i >= k} B_i
    p_left = np.concatenate([np.cumsum(p[::-1])[::-1], [0.0]])
    c = (f.sum() + b_left) / (f.sum() + b.sum())
    return c, p_left / p.sum(), 1.0 - b_left / b.sum()


def compute_scale(groups: tuple[LayerGroup, ...], frozen: int) -> float:
    """c_k: the compute time left with the first `frozen` groups frozen."""
    return float(level_scales(groups)[0][frozen])


def sync_scale(groups: tuple[LayerGroup, ...], frozen: int) -> float:
    """s_k: the share of parameters still all-reduced."""
    return float(level_scales(groups)[1][frozen])


def frozen_fraction(groups: tuple[LayerGroup, ...], frozen: int) -> float:
    """phi_k: the share of backward compute frozen."""
    return float(level_scales(groups)[2][frozen])


def scaled_params(params: ThroughputParams, compute: Any, sync: Any) -> ThroughputParams:
    """Compute parameters scaled by `compute` (c_k), the four sync parameters by `sync` (s_k):
    floats, or arrays aligned with array-valued parameters (the vectorized valuations of
    formulations.options and .joint, one row per option, as best_batch takes them)."""
    p = params
    return ThroughputParams(p.alpha_c * compute, p.beta_c * compute, p.alpha_n * sync, p.beta_n * sync,
                            p.alpha_r * sync, p.beta_r * sync, p.gamma)


def frozen_step_sync_s(step_s: float, sync_s: float, groups: tuple[LayerGroup, ...], frozen: int) -> tuple[float, float]:
    """A measured (step, sync) time with `frozen` groups frozen: compute (step - sync) scaled by
    c_k, sync by s_k (how the replay's ground truth freezes)."""
    if frozen == 0:
        return step_s, sync_s
    sync = sync_s * sync_scale(groups, frozen)
    return (step_s - sync_s) * compute_scale(groups, frozen) + sync, sync


def penalty(model: FreezePenalty, phi, progress):
    """Our frozen penalty pi(phi, q) = 1 - exp(-scale * phi^exponent * (1 - q)^decay).

    The share of a step's worth lost with a fraction `phi` of the backward compute frozen at
    training progress q = `progress` (clipped to [0, 1]): 0 when nothing is frozen, and less
    the later in training (module docstring: ours, fitted to FreezeOut's numbers).

    Examples
    --------
    Half the backward frozen costs most of a step at the start of training, a third at half way:

    >>> from schedlab.state import FreezePenalty
    >>> [round(float(penalty(FreezePenalty(), 0.5, q)), 3) for q in (0.0, 0.5, 0.9)]
    [0.835, 0.362, 0.018]
    """
    phi = np.asarray(phi, dtype=float)
    q = np.clip(np.asarray(progress, dtype=float), 0.0, 1.0)
    return 1.0 - np.exp(-model.scale * phi**model.exponent * (1.0 - q) ** model.decay)


def level_penalties(spec: FreezeSpec) -> np.ndarray:
    """pi of every freeze level 0..len(groups)-1 at the job's current progress."""
    return penalty(spec.penalty, level_scales(spec.groups)[2][:-1], spec.progress)


def geometric_frozen_groups(num_groups: int, epoch: int, rate: float = 1 / 3) -> int:
    """PipeTransformer's schedule: L_frozen(T) = ceil(L (1 - (1 - a)^T)), at most all but one."""
    frozen = math.ceil(num_groups * (1.0 - (1.0 - rate) ** epoch) - 1e-9)
    return min(max(frozen, 0), num_groups - 1)


def linear_schedule_speedup_and_penalty(groups: tuple[LayerGroup, ...], phi_max: float, model: FreezePenalty,
                                        points: int = 2001) -> tuple[float, float]:
    """FreezeOut-style calibration: (speedup - 1, total penalty P) of a linear freezing schedule.

    phi grows linearly from 0 to phi_max over training on a compute-bound job; the frozen share
    is continuous (FreezeOut freezes layer by layer; groups are too coarse for the calibration).

    Examples
    --------
    The default penalty's calibration points (module docstring): ~20 % faster for a 3 % penalty,
    ~10 % faster for 0.5 %:

    >>> from schedlab.state import FreezePenalty
    >>> groups = layer_profile("cifar10")
    >>> [tuple(round(v, 3) for v in linear_schedule_speedup_and_penalty(groups, phi, FreezePenalty()))
    ...  for phi in (0.5, 0.27)]
    [(0.2, 0.029), (0.099, 0.005)]
    """
    f = sum(g.forward for g in groups)
    b = sum(g.backward for g in groups)
    q = np.linspace(0.0, 1.0, points)
    phi = phi_max * q
    step = (f + b * (1.0 - phi)) / (f + b)
    return float(1.0 / np.trapezoid(step, q) - 1.0), float(np.trapezoid(penalty(model, phi, q), q))
