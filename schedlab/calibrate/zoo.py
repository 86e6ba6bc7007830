"""The calibration model zoo: networks built offline with random weights, each with a synthetic
batch and its layer groups (input first, as models.freezing cuts them).

    resnet18     ResNet-18, CIFAR variant (3x3 stem, 32x32 inputs, 10 classes)
    resnet50     ResNet-50, ImageNet (224x224, 1,000 classes)
    bert-base    BERT-base for SQuAD (sequence 384, span-start/end head)
    gpt2-small   a GPT-2-small-like decoder (12 layers, d = 768, vocabulary 50,257, sequence 1,024)
    ncf          NeuMF on MovieLens-1M sizes (GMF factor 8, MLP 64-32-16-8)
    tiny-mlp     a 3-layer MLP for tests
torchvision's ResNets and transformers' BERT are used where installed; otherwise the built-in
definitions below (same layer shapes). Nothing is downloaded. Importing this module needs torch
(the optional extra schedlab[calibrate]).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["ZOO", "ZooModel", "build"]


@dataclass(frozen=True)
class ZooModel:
    """A network, how to draw a batch for it, its loss, and its layer groups."""

    name: str
    module: nn.Module
    batch: Callable[[int, torch.Generator, str], tuple]  # (bsz, generator, device) -> (inputs, target)
    loss: Callable[[nn.Module, tuple], torch.Tensor]
    groups: tuple[tuple[nn.Module, ...], ...]


class _Basic(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
                                  nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out))
        self.short = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                      if stride != 1 or c_in != c_out else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.short(x))


class _Bottleneck(nn.Module):
    def __init__(self, c_in: int, width: int, stride: int):
        super().__init__()
        c_out = 4 * width
        self.body = nn.Sequential(
            nn.Conv2d(c_in, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.short = (nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
                      if stride != 1 or c_in != c_out else nn.Identity())

    def forward(self, x):
        return F.relu(self.body(x) + self.short(x))


def _stages(block, widths_blocks, c_in: int, expansion: int) -> tuple[list[nn.Module], int]:
    stages: list[nn.Module] = []
    for i, (width, blocks) in enumerate(widths_blocks):
        layers = []
        for b in range(blocks):
            layers.append(block(c_in, width, 2 if b == 0 and i > 0 else 1))
            c_in = width * expansion
        stages.append(nn.Sequential(*layers))
    return stages, c_in


def _classifier(stem: nn.Module, stages: list[nn.Module], head: nn.Module, hw: int, classes: int) -> ZooModel:
    net = nn.Sequential(stem, *stages, nn.AdaptiveAvgPool2d(1), nn.Flatten(), head)

    def batch(bsz: int, gen: torch.Generator, device: str):
        x = torch.randn(bsz, 3, hw, hw, generator=gen).to(device)
        return x, torch.randint(0, classes, (bsz,), generator=gen).to(device)

    groups = ((stem, stages[0]), (stages[1],), (stages[2],), (stages[3], head))
    return ZooModel("", net, batch, lambda m, b: F.cross_entropy(m(b[0]), b[1]), groups)


def resnet18_cifar() -> ZooModel:
    """ResNet-18, CIFAR variant (3x3 stem, 32x32 inputs, 10 classes), in models.freezing's 4 groups."""
    stem = nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU())
    stages, c = _stages(_Basic, [(64, 2), (128, 2), (256, 2), (512, 2)], 64, 1)
    m = _classifier(stem, stages, nn.Linear(c, 10), 32, 10)
    return ZooModel("resnet18", m.module, m.batch, m.loss, m.groups)


def resnet50() -> ZooModel:
    """ResNet-50 for ImageNet (224x224, 1,000 classes), torchvision's where installed; 4 groups."""
    try:
        from torchvision.models import resnet50 as tv_resnet50
    except ImportError:
        tv_resnet50 = None
    if tv_resnet50 is not None:
        net = tv_resnet50(weights=None)
        stem = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool)
        stages, head = [net.layer1, net.layer2, net.layer3, net.layer4], net.fc
    else:
        stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        stages, c = _stages(_Bottleneck, [(64, 3), (128, 4), (256, 6), (512, 3)], 64, 4)
        head = nn.Linear(c, 1000)
    m = _classifier(stem, stages, head, 224, 1000)
    return ZooModel("resnet50", m.module, m.batch, m.loss, m.groups)


class _Transformer(nn.Module):
    """Token + position embeddings, pre- or post-norm encoder layers, a linear head."""

    def __init__(self, vocab: int, seq: int, layers: int, d: int, heads: int, d_ff: int, out: int, causal: bool):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(seq, d)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(d, heads, d_ff, dropout=0.1, activation="gelu",
                                                               batch_first=True, norm_first=causal)
                                    for _ in range(layers))
        self.head = nn.Linear(d, out, bias=not causal)
        if causal and out == vocab:  # GPT-2 ties its output projection to the token embedding
            self.head.weight = self.embed.weight
        self.causal = causal

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device) if self.causal else None
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=self.causal)
        return self.head(x)


def _layer_groups(embed: tuple[nn.Module, ...], layers, head: nn.Module, per_group: int = 3):
    blocks = [tuple(layers[i: i + per_group]) for i in range(0, len(layers), per_group)]
    return (embed,) + tuple(blocks[:-1]) + (blocks[-1] + (head,),)


def bert_base(seq_len: int = 384) -> ZooModel:
    """BERT-base for SQuAD at `seq_len` tokens (span start and end loss), transformers' where installed.

    Groups: the embeddings, then the encoder layers three at a time (the head with the last).
    """
    vocab = 30522

    def batch(bsz: int, gen: torch.Generator, device: str):
        tokens = torch.randint(0, vocab, (bsz, seq_len), generator=gen).to(device)
        return tokens, torch.randint(0, seq_len, (bsz, 2), generator=gen).to(device)

    try:
        from transformers import BertConfig, BertForQuestionAnswering
    except ImportError:
        BertForQuestionAnswering = None
    if BertForQuestionAnswering is not None:
        net = BertForQuestionAnswering(BertConfig())

        def qa_loss(m, b):
            out = m(input_ids=b[0], start_positions=b[1][:, 0], end_positions=b[1][:, 1])
            return out.loss

        groups = _layer_groups((net.bert.embeddings,), list(net.bert.encoder.layer), net.qa_outputs)
        return ZooModel("bert-base", net, batch, qa_loss, groups)
    net = _Transformer(vocab, 512, 12, 768, 12, 3072, 2, causal=False)

    def loss(m, b):
        logits = m(b[0])
        return F.cross_entropy(logits[..., 0], b[1][:, 0]) + F.cross_entropy(logits[..., 1], b[1][:, 1])

    return ZooModel("bert-base", net, batch, loss, _layer_groups((net.embed, net.pos), list(net.layers), net.head))


def gpt2_small(seq_len: int = 1024) -> ZooModel:
    """A GPT-2-small-like causal decoder on `seq_len` tokens, next-token loss; groups as bert_base's."""
    vocab = 50257
    net = _Transformer(vocab, seq_len, 12, 768, 12, 3072, vocab, causal=True)

    def batch(bsz: int, gen: torch.Generator, device: str):
        tokens = torch.randint(0, vocab, (bsz, seq_len + 1), generator=gen).to(device)
        return tokens[:, :-1], tokens[:, 1:]

    def loss(m, b):
        return F.cross_entropy(m(b[0]).flatten(0, 1), b[1].flatten())

    return ZooModel("gpt2-small", net, batch, loss, _layer_groups((net.embed, net.pos), list(net.layers), net.head))


class _NeuMF(nn.Module):
    def __init__(self, users: int, items: int, factor: int = 8, mlp=(64, 32, 16, 8)):
        super().__init__()
        self.gmf_user, self.gmf_item = nn.Embedding(users, factor), nn.Embedding(items, factor)
        self.mlp_user, self.mlp_item = nn.Embedding(users, mlp[0] // 2), nn.Embedding(items, mlp[0] // 2)
        self.mlp = nn.Sequential(*(m for a, b in zip(mlp, mlp[1:]) for m in (nn.Linear(a, b), nn.ReLU())))
        self.predict = nn.Linear(factor + mlp[-1], 1)

    def forward(self, pairs):
        u, i = pairs[:, 0], pairs[:, 1]
        gmf = self.gmf_user(u) * self.gmf_item(i)
        mlp = self.mlp(torch.cat([self.mlp_user(u), self.mlp_item(i)], dim=1))
        return self.predict(torch.cat([gmf, mlp], dim=1)).squeeze(1)


def ncf(users: int = 6040, items: int = 3706) -> ZooModel:
    """NeuMF for `users` x `items`, binary cross-entropy; groups: embeddings, MLP, prediction."""
    net = _NeuMF(users, items)

    def batch(bsz: int, gen: torch.Generator, device: str):
        pairs = torch.stack([torch.randint(0, users, (bsz,), generator=gen), torch.randint(0, items, (bsz,), generator=gen)], 1)
        return pairs.to(device), torch.randint(0, 2, (bsz,), generator=gen).float().to(device)

    groups = ((net.gmf_user, net.gmf_item, net.mlp_user, net.mlp_item), (net.mlp,), (net.predict,))
    return ZooModel("ncf", net, batch, lambda m, b: F.binary_cross_entropy_with_logits(m(b[0]), b[1]), groups)


def tiny_mlp() -> ZooModel:
    """A 32-64-64-4 MLP for tests, one group per layer."""
    layers = [nn.Sequential(nn.Linear(32, 64), nn.ReLU()), nn.Sequential(nn.Linear(64, 64), nn.ReLU()), nn.Linear(64, 4)]
    net = nn.Sequential(*layers)

    def batch(bsz: int, gen: torch.Generator, device: str):
        return torch.randn(bsz, 32, generator=gen).to(device), torch.randint(0, 4, (bsz,), generator=gen).to(device)

    return ZooModel("tiny-mlp", net, batch, lambda m, b: F.cross_entropy(m(b[0]), b[1]), tuple((layer,) for layer in layers))


ZOO: dict[str, Callable[[], ZooModel]] = {"resnet18": resnet18_cifar, "resnet50": resnet50, "bert-base": bert_base,
                                          "gpt2-small": gpt2_small, "ncf": ncf, "tiny-mlp": tiny_mlp}


def build(name: str, seed: int = 0) -> ZooModel:
    """A fresh zoo model by name, its random weights drawn after torch.manual_seed(seed)."""
    if name not in ZOO:
        raise KeyError(f"unknown model {name!r}; use one of {', '.join(sorted(ZOO))}")
    torch.manual_seed(seed)
    return ZOO[name]()
