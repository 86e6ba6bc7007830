r"""Layer-elastic rounds (after IceFrog, TPDS 2025): GPUs, batch size and freeze level, jointly.

Follows IceFrog's idea (schedule on layer-aware throughput x (1 - frozen penalty) under a per-job
accuracy budget) with our own throughput and penalty models (models.freezing); the capacity
model, fairness and restart factor are the goodput model's (goodput.py), unchanged.

**Sets**

- $J, C_j, \mathit{Grp}, \dots$ as in goodput.py;
  $F_j = \{\mathit{min\_frozen}_j, \dots, \mathit{max\_frozen}_j\}$ freeze levels of job $j$
  ($\{0\}$ for a job that does not opt in)

**Parameters** (for option $c$ of job $j$ and level $k \in F_j$)

- $g_{ck}$ goodput with the first $k$ layer groups frozen, at its best batch: Pollux's model
  with compute scaled by $c_k$ and sync by $s_k$ (models.freezing.scaled_params)
- $\pi_{jk}$ frozen penalty at the job's progress $q_j$: $\pi(\phi_k, q_j)$
- $e_{ck}$ effective speedup
  $g_{ck} \, (1 - \pi_{jk}) / g_j(\text{fair share, unfrozen}) \times \text{restart factor}$
- $u_{ck}$ $U(e_{ck})$, the goodput model's utility (p-mean; max-min uses $e_{ck}$)
- $d_{ck}$ penalty spent this round
  $\pi_{jk} \, g_{ck} \, (1 - \pi_{jk}) \, \mathit{round\_s} / (M0_j \, N_j)$,
  $N_j$ = training length in steps at the initial batch $M0_j$ (progress this round times the
  penalty rate: the job's total penalty is the integral of $\pi \, dq$)
- $b_j$ the job's budget left

**Variables**

- $x_{ck} \in \{0, 1\}$: option $c$ is chosen at freeze level $k$ (and goodput.py's $w$, $t$)

**Objective** (p-mean; max-min as goodput.py)

$$
\max \; \sum_j U0_j + \sum_{c, k} \bigl(u_{ck} - U0_j\bigr) \, x_{ck}
$$

**Constraints**

$$
\begin{aligned}
&\text{(one)}    && \sum_{c \in C_j,\ k \in F_j} x_{ck} \le 1             && j \in J \\
&\text{(budget)} && \sum_{c \in C_j,\ k \in F_j} d_{ck} \, x_{ck} \le b_j && j \in J
\end{aligned}
$$

and (level), (slots), (minspd) of goodput.py, with $a_c$, $z_c$, $h_{kc}$ independent of $k$.

**Reduction (exact).** By (one) a job picks at most one $(c, k)$, so (budget) reads
$d_{ck} \le b_j$ for the chosen pair: it removes pairs, it couples nothing. And since capacity
does not depend on $k$, of the admissible levels of one configuration $c$ only the best,

$$
k^*(c) = \operatorname*{argmax}_{k \in F_j,\ d_{ck} \le b_j} u_{ck},
$$

can be in an optimum. So the model is goodput.py's over the options $(c, k^*(c))$: the same
size as without freezing, solved by the same code. Level 0 spends nothing and is in $F_j$
unless the job forbids it ($\mathit{min\_frozen} > 0$), so the round's optimum with freezing is
never below the one without. What we changed from IceFrog: everything about the penalty (ours),
and layer-group rather than per-layer freezing (4-6 groups per network).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from schedlab.formulations.options import OptionSet, enumerate_options, utility
from schedlab.models.freezing import level_penalties, level_scales
from schedlab.state import JobSpec, RoundInput

__all__ = ["enumerate_freeze_options", "fold_freeze_levels", "has_freezing"]

_BUDGET_TOL = 1e-12  # floating-point slack on d_ck <= b_j


def has_freezing(round_input: RoundInput) -> bool:
    """Whether some job of the round opts in to layer freezing."""
    return any(job.freezing is not None for job in round_input.jobs)


class _PerJob(NamedTuple):
    """Per job j and level k (arrays over jobs, or jobs x levels 0..top)."""

    lo: np.ndarray  # allowed levels [lo_j, hi_j]
    hi: np.ndarray
    pi: np.ndarray  # pi_jk
    c: np.ndarray  # c_jk, s_jk: compute and sync left with k groups frozen (1 at k = 0)
    s: np.ndarray
    per_goodput: np.ndarray  # progress this round per unit of goodput, round_s / (M0 N)
    budget: np.ndarray  # budget left
    gain_bound: np.ndarray  # (1 - pi_jk) / min(c_jk, s_jk)


def _per_job(jobs: tuple[JobSpec, ...], top: int, round_s: float) -> _PerJob:
    """What fold_freeze_levels reads of each job. Freezing shrinks every part of the step by at
    least min(c_k, s_k), so g_ck <= g_c0 / min(c_k, s_k): where gain_bound <= 1 level k is never
    worth more than level 0, which spends nothing."""
    lo = np.array([job.freezing.min_frozen if job.freezing else 0 for job in jobs], dtype=int)
    hi = np.array([job.freezing.top_level if job.freezing else 0 for job in jobs], dtype=int)
    pi, gain_bound = np.zeros((len(jobs), top + 1)), np.ones((len(jobs), top + 1))
    c, s = np.ones((len(jobs), top + 1)), np.ones((len(jobs), top + 1))
    per_goodput, budget = np.zeros(len(jobs)), np.full(len(jobs), np.inf)
    for j, job in enumerate(jobs):
        if job.freezing:
            levels = slice(0, hi[j] + 1)
            pi[j, levels] = level_penalties(job.freezing)[levels]
            c_k, s_k, _ = level_scales(job.freezing.groups)
            c[j, levels], s[j, levels] = c_k[levels], s_k[levels]
            gain_bound[j, levels] = (1.0 - pi[j, levels]) / np.minimum(c_k, s_k)[levels]
            per_goodput[j] = round_s / (job.batch.init_bsz * job.freezing.total_steps)
            budget[j] = job.freezing.budget_left + _BUDGET_TOL
    return _PerJob(lo, hi, pi, c, s, per_goodput, budget, gain_bound)


def enumerate_freeze_options(round_input: RoundInput, prune: bool = True) -> OptionSet:
    """Every job's options (c, k*(c)) with effective speedup, utility and penalty spent."""
    return fold_freeze_levels(round_input, enumerate_options(round_input, prune=False), prune)


def fold_freeze_levels(round_input: RoundInput, base, prune: bool = True):
    """`base` (every option of a round, unpruned: an OptionSet, or the joint model's options)
    with each option at its best admissible freeze level k*(c). The base revalues its options with
    their compute and sync scaled (`revalue`), knows its dominance (`undominated`) and selects options (`subset`)."""
    jobs, s = round_input.jobs, round_input.settings
    top = max((job.freezing.top_level for job in jobs if job.freezing), default=0)
    n = base.num_options
    ratio = np.divide(base.penalized_speedup, base.speedup, out=np.zeros(n), where=base.speedup > 0)  # restart factor
    fair = np.divide(base.goodput, base.speedup, out=np.zeros(n), where=base.speedup > 0)

    lo, hi, pi_jk, c_jk, s_jk, per_goodput, budget, gain_bound = _per_job(jobs, top, round_input.round_s)
    jc = base.job

    # value[k, c] (-inf where level k is not allowed), speed[k, c] (effective speedup before the
    # restart factor), spent[k, c] and the batch of every (level, option)
    value = np.full((top + 1, n), -np.inf)
    speed, spent, goodput = np.zeros((top + 1, n)), np.zeros((top + 1, n)), np.zeros((top + 1, n))
    local, accum = np.zeros((top + 1, n), dtype=int), np.zeros((top + 1, n), dtype=int)
    goodput[0], local[0], accum[0] = base.goodput, base.local_bsz, base.accum_steps
    # Skip (level, option) pairs that level 0 beats for sure (see _per_job), or that are over
    # budget even at the unfrozen goodput (g_ck >= g_c0: freezing never slows a step down).
    # Only where level 0 is allowed (lo = 0); otherwise every allowed level stays.
    rows_of = []
    for k in range(top + 1):
        pi = pi_jk[jc, k]
        useful = (gain_bound[jc, k] > 1.0) & (pi * (1.0 - pi) * base.goodput * per_goodput[jc] <= budget[jc])
        rows_of.append(np.flatnonzero((lo[jc] <= k) & (k <= hi[jc]) & ((k == 0) | (lo[jc] > 0) | useful)))
    which = np.concatenate(rows_of[1:]) if top else np.zeros(0, dtype=int)
    if len(which):  # every frozen (level, option) valued in one vectorized best-batch call
        level = np.concatenate([np.full(len(r), k) for k, r in enumerate(rows_of) if k])
        choice = base.revalue(which, c_jk[jc[which], level], s_jk[jc[which], level])
        goodput[level, which], local[level, which], accum[level, which] = choice.goodput, choice.local_bsz, choice.accum_steps
    for k, rows in enumerate(rows_of):
        g, pi = goodput[k, rows], pi_jk[jc[rows], k]
        speed[k, rows] = np.divide(g * (1.0 - pi), fair[rows], out=np.zeros(len(rows)), where=fair[rows] > 0)
        spent[k, rows] = pi * g * (1.0 - pi) * per_goodput[jc[rows]]
        ok = rows[(speed[k, rows] * ratio[rows] > 0) & (spent[k, rows] <= budget[jc[rows]])]
        value[k, ok] = speed[k, ok] * ratio[ok]

    best = np.argmax(value, axis=0)  # k*(c): the lowest level among ties
    col = np.arange(n)
    keep = np.isfinite(value[best, col])
    eff = np.where(keep, value[best, col], 0.0)
    if prune:
        util = np.where(keep, utility(np.where(keep, eff, 1.0), s.p), -np.inf)
        keep &= base.undominated(util)
    pick = np.flatnonzero(keep)
    k_pick = best[pick]
    return replace(
        base.subset(pick), goodput=goodput[k_pick, pick], speedup=speed[k_pick, pick], penalized_speedup=eff[pick],
        utility=utility(eff[pick], s.p), local_bsz=local[k_pick, pick], accum_steps=accum[k_pick, pick],
        frozen_groups=k_pick, freeze_penalty=spent[k_pick, pick],
    )
