"""Per-GPU performance variability (PAL, Jain et al. SC'24): slowdown factors per class.

For each application class (PAL's profiles.json: A ResNet-like, B and C BERT-like, D
PageRank-like) the measured GPUs' performance (median `perf` over each GPU's runs; higher is
slower) is clustered:
  1. outliers, perf > mean + 3 sigma, each become a class of their own;
  2. the rest are clustered by k-means (scikit-learn, 10 seeded restarts) with k in 2..10
     chosen by the best silhouette score (scikit-learn's; over a simulated cluster of more than
     SILHOUETTE_PAIRWISE_MAX GPUs, the same score over the distinct values with their counts);
  3. a GPU's slowdown factor is its cluster's centroid / the median k-means centroid (the
     outliers' own classes do not move the reference: a typical GPU stays near 1).
What we changed: PAL's artifact always ends with k = 2 (its selection loop keeps the first k);
here k is the silhouette's choice, reported per class by `classify`.

Simulated clusters get measured GPUs reproducibly, from a seeded numpy Generator, in one of two
ways:
  - `assign_slowdowns`: each GPU draws, per class, one measured GPU (without replacement while
    they last) and takes its cluster's factor: truth and what a policy sees are the tiers;
  - `sample_measured` + `tiered` (PAL's simulator): each GPU draws, per class, one measured GPU
    (with replacement) and runs at that GPU's slowest run over the median slowest run; a
    policy sees the tiers of the cluster's own values (`tiered`: the clustering above, run
    over the simulated GPUs), so an unlucky GPU's tail is truth but not foreseen exactly.
The artifact's ready 8 x 4 table (32gpu-variability.csv) is available as is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from schedlab.errors import ConfigError
from schedlab.models.profiles import data_dir

__all__ = ["CLASSES", "K_RANGE", "SILHOUETTE_PAIRWISE_MAX", "ClassVariability", "assign_slowdowns", "classify",
           "measured_classes", "ready_32gpu", "sample_measured", "silhouette_of_distinct", "tiered"]

CLASSES = ("classA", "classB", "classC", "classD")
K_RANGE = range(2, 11)


@dataclass(frozen=True)
class ClassVariability:
    """One class's clustering: per measured GPU its slowdown factor, and the clusters found."""

    name: str
    gpu_perf: pd.Series  # uuid -> median perf
    labels: np.ndarray  # cluster per GPU, aligned with gpu_perf
    centroids: np.ndarray  # per cluster (inliers' k-means centroids, then one per outlier)
    k: int  # clusters chosen by silhouette among the inliers
    outliers: int

    @property
    def slowdown(self) -> pd.Series:
        """uuid -> slowdown factor (centroid / median k-means centroid)."""
        factors = self.centroids / np.median(self.centroids[: self.k])
        return pd.Series(factors[self.labels], index=self.gpu_perf.index, name=self.name)

    @property
    def tiers(self) -> np.ndarray:
        """The distinct slowdown factors, ascending."""
        return np.unique(np.round(self.centroids / np.median(self.centroids[: self.k]), 6))


# Above this many values the silhouette is computed over the distinct values (`silhouette_of_distinct`):
# scikit-learn's compares every pair, 2 s for 10,000 values per k, and a simulated cluster's
# GPUs draw from a few hundred measured ones (16,384 GPUs: 83 s to tier; 65,536: over 15 min).
SILHOUETTE_PAIRWISE_MAX = 8_192


def silhouette_of_distinct(values: np.ndarray, labels: np.ndarray) -> float:
    """The mean silhouette coefficient of 1-D `values` in clusters `labels` (scikit-learn's
    silhouette_score, the same definition), computed over the distinct values with their counts:
    equal values share a label (k-means assigns a point to its nearest centroid), so each
    distinct value's sums of distances to every cluster serve all its copies. a(i): the mean
    distance to the other members of its cluster; b(i): the least mean distance to another
    cluster; s(i) = (b - a) / max(a, b), 0 in a cluster of one."""
    distinct, first, count = np.unique(values, return_index=True, return_counts=True)
    label = labels[first]
    k = int(labels.max()) + 1
    member = np.zeros((len(distinct), k))
    member[np.arange(len(distinct)), label] = count
    to_cluster = np.abs(distinct[:, None] - distinct[None, :]) @ member  # sum of distances to each cluster
    size = member.sum(axis=0)
    own = size[label]
    a = to_cluster[np.arange(len(distinct)), label] / np.maximum(own - 1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_to = to_cluster / size
        mean_to[np.arange(len(distinct)), label] = np.inf
        b = mean_to.min(axis=1)
        s = np.nan_to_num((b - a) / np.maximum(a, b))
    s = np.where(own > 1, s, 0.0)
    return float(count @ s / count.sum())


def classify(perf: pd.Series, name: str = "", seed: int = 0) -> ClassVariability:
    """Cluster per-GPU perf values (uuid -> perf) as PAL does, with k by silhouette.

    Values above the mean by more than 3 standard deviations are outliers, each its own cluster.
    Inliers of at most K_RANGE.start distinct values (a cluster of a few GPUs) leave no k to
    choose: each value is its own cluster (PAL tiers hundreds of GPUs; a 2-GPU cluster raised)."""
    values = perf.to_numpy(float)
    if not len(values):
        raise ConfigError(f"variability {name}: no GPUs to tier; give the cluster at least one GPU")
    outlier = values > values.mean() + 3 * values.std()
    inliers = values[~outlier]
    distinct, inverse = np.unique(inliers, return_inverse=True)
    k, inlier_labels, centers = ((len(distinct), inverse, distinct) if len(distinct) <= K_RANGE.start
                                 else _kmeans_tiers(inliers, len(distinct), seed))
    labels = np.empty(len(values), dtype=int)
    labels[~outlier] = inlier_labels
    labels[outlier] = k + np.arange(outlier.sum())
    centroids = np.concatenate([centers, values[outlier]])
    return ClassVariability(name, perf, labels, centroids, k, int(outlier.sum()))


def _kmeans_tiers(inliers: np.ndarray, num_distinct: int, seed: int) -> tuple[int, np.ndarray, np.ndarray]:
    """PAL's k-means of the inliers, k in K_RANGE (below their distinct values) of the best
    silhouette: (k, each inlier's cluster, the centroids)."""
    from sklearn.cluster import KMeans  # here: only clusters with measured variability need k-means
    from sklearn.metrics import silhouette_score

    column = inliers.reshape(-1, 1)
    best = None
    for k in K_RANGE:
        if k >= num_distinct:
            break
        km = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(column)
        score = (silhouette_score(column, km.labels_) if len(column) <= SILHOUETTE_PAIRWISE_MAX
                 else silhouette_of_distinct(inliers, km.labels_))
        if best is None or score > best[0]:
            best = (score, k, km)
    assert best is not None  # k = K_RANGE.start is below num_distinct
    _, k, km = best
    return k, km.labels_, km.cluster_centers_.ravel()


@cache
def measured_classes(seed: int = 0) -> dict[str, ClassVariability]:
    """PAL's four classes from the shipped Longhorn measurements."""
    folder = data_dir() / "pal"
    files = json.loads((folder / "profiles.json").read_text())
    out = {}
    for name in CLASSES:
        df = pd.read_csv(folder / files[name], usecols=["uuid", "perf"])
        out[name] = classify(df.groupby("uuid").perf.median(), name, seed)
    return out


def assign_slowdowns(gpu_ids: list[str], rng: np.random.Generator,
                     classes: dict[str, ClassVariability] | None = None) -> dict[str, dict[str, float]]:
    """Per simulated GPU, per class, the slowdown factor of a measured GPU drawn at random
    (without replacement while the measured GPUs last)."""
    classes = classes or measured_classes()
    out: dict[str, dict[str, float]] = {g: {} for g in gpu_ids}
    for name, cv in classes.items():
        factors = cv.slowdown.to_numpy(float)
        pick = rng.permutation(len(factors))
        while len(pick) < len(gpu_ids):
            pick = np.concatenate([pick, rng.permutation(len(factors))])
        for g, i in zip(gpu_ids, pick):
            out[g][name] = float(factors[i])
    return out


@cache
def _worst_runs() -> dict[str, np.ndarray]:
    """Per class, each measured GPU's slowest run over the median of those (PAL's simulator)."""
    folder = data_dir() / "pal"
    files = json.loads((folder / "profiles.json").read_text())
    out = {}
    for name in CLASSES:
        worst = pd.read_csv(folder / files[name], usecols=["uuid", "perf"]).groupby("uuid").perf.max()
        out[name] = (worst / worst.median()).to_numpy(float)
    return out


def sample_measured(gpu_ids: list[str], rng: np.random.Generator) -> dict[str, dict[str, float]]:
    """Per simulated GPU, per class, the worst-run slowdown of a measured GPU drawn with replacement."""
    out: dict[str, dict[str, float]] = {g: {} for g in gpu_ids}
    for name, factors in _worst_runs().items():
        for g, value in zip(gpu_ids, rng.choice(factors, size=len(gpu_ids))):
            out[g][name] = float(value)
    return out


def tiered(slowdowns: dict[str, dict[str, float]], seed: int = 0) -> dict[str, dict[str, float]]:
    """What a policy sees of measured slowdowns: per class, `classify` over these GPUs' values."""
    gpu_ids = list(slowdowns)
    out: dict[str, dict[str, float]] = {g: {} for g in gpu_ids}
    for name in slowdowns[gpu_ids[0]]:
        values = pd.Series([slowdowns[g][name] for g in gpu_ids], index=gpu_ids)
        for g, factor in classify(values, name, seed).slowdown.items():
            out[g][name] = float(factor)
    return out


def ready_32gpu() -> pd.DataFrame:
    """The artifact's 8 x 4 table: node, gpu, and one slowdown column per class."""
    df = pd.read_csv(data_dir() / "pal" / "aggregated_data" / "32gpu-variability.csv")
    out = df.rename(columns={"Node_ID": "node", "Local_GPU_ID": "gpu"})[["node", "gpu"]]
    for name in CLASSES:
        out[name] = df[f"PerfVar_{name}"]
    return out
