r"""The joint round: Pollux's goodput with every GPU's variability tier and the topology's spread.

Follows goodput.py (Pollux's goodput and p-mean fairness as Sia's configuration MILP) and PAL
(Jain et al. SC'24: a data-parallel job runs at the speed of its slowest GPU, per-GPU slowdown
factors per application class, grouped into tiers). What we changed, and ours: a GPU's factor
scales the compute part of Pollux's step ($\alpha_c$, $\beta_c$) and not its sync; a spread's
inter-node sync ($\alpha_n$, $\beta_n$) scales with $B_{\mathit{ref}} / B$, $B$ the bottleneck
bandwidth of the links joining its nodes in the topology graph (schedlab.topology) and
$B_{\mathit{ref}}$ the node link bandwidth the model was fitted at; a job spanning nodes runs
`across_node_factor` times slower (PAL's flat penalty, 1 unless the topology sets it). Factors
of one class within `tier_tolerance` (relative) of a tier's smallest are one tier, valued at the
tier's largest: predictions are never optimistic.

Ours too, for scale: a job's options name kinds of placement (a GPU type, size, tier and scope),
not nodes, and integer counts say how many jobs of each kind each kind of node, pool or rack
takes, so the model grows with the jobs plus the kinds of node, not with their product (a
2,048-GPU round with PAL's measured variability: 2.6 million node-by-node options before, tens
of thousands now). Nodes whose GPUs differ alike are one pool and share their slots with every
pool of their kind, however their running jobs hold them (bins, counted patterns): at 2,048
GPUs, 350 such nodes are 168 pools of 30 kinds, and the model 2,360 rows, not 5,100.

**Sets**

- $J$ jobs, $a_j$ the variability class of job $j$; $A$ the classes in play
- $H$ homogeneous node groups: nodes of one GPU type, size $G_g$, rack and signature (every GPU
  of the node alike: its tier in every class); $K_g$ its nodes; $L_g = \mathit{chain\_levels}(G_g)$;
  $S_k$, $K1_g$, $K2_g$ as goodput.py (the stay options holding GPUs on node $k$; the nodes of
  $g$ with exactly one / several)
- $X$ heterogeneous pools: nodes of one GPU type, size and rack whose GPUs are of several
  signatures, the same ones in the same numbers (wherever on the node); a slice $s$ is a node's
  GPUs of one signature, $n_s$ of them; $K_w$ the pool's nodes
- $W = H \cup X$ pools of whole nodes; $|K_w|$ nodes, worst tier $\tau_{wa}$ over its GPUs for class $a$
- $F = H \cup Q$ kinds of node: a homogeneous group alone, or the heterogeneous pools $X_f$ of
  one GPU type, size and slices over every rack (a job on one node does not care which)
- $D$ demands $\delta = (a, \mathit{type}, d, t)$: $d$ GPUs of one type on one node, worst tier
  $t$ for class $a$; $Y$ slots $\sigma = (f, a, m)$: one job of class $a$ on a node of kind $f$
  taking $m_s$ GPUs of each slice ($f \in H$: one slice, $m = d \in L_f$; $f \in Q$: any
  $m \le n_{f\cdot}$ with a total $\ge 1$), serving the demand $\delta(\sigma)$ of its class,
  type, size and worst tier $\max_{s: m_s > 0} \tau_{sa}$
- $E$ multi-node definitions: for a class $a$, GPU type and size, tier $t$ and scope (one rack,
  or all racks), the pools $E_e = \{w : \tau_{wa} \le t,\ \mathit{rack}(w) \in R_e\}$;
  $N_e$ = multi_node_counts($\sum_{w \in E_e} |K_w|$) its node counts
- $B_w$ the bins of $w \in X$: its nodes running one job (a stay option) that holds $h$ GPUs
  per slice, one bin for each $h$, and each node running several alone (a lone bin); $K_b$ its
  nodes; a position $i$ of a bin is a running job of each of its nodes, $c_{ki}$ the stay
  option at position $i$ of node $k$, holding $h_{bi}$ GPUs per slice
- $\Pi_w$ the patterns of $w \in X$: free ones $(\emptyset, P)$ and, of each bin $b \in B_w$,
  held ones $(S, P) \in \Pi_b$, $S$ a nonempty set of its positions; $P$ the parts (a multiset
  of compositions) of a vector partition of the GPUs per slice that $S$'s jobs leave free; of
  the $P$ of one $S$ only the maximal ones in the compositions some slot of the kind uses;
  $\mathit{cnt}_\pi(m)$ the parts of $\pi$ equal to $m$
- $M$ multi-node groups: the definitions of one class, type, size, tier and bandwidth scale,
  over all racks (one definition) or within one rack (one per rack: a job takes nodes of one
  rack, whichever); $E_\mu$ the definitions of group $\mu$
- $C_j$ options of job $j$ (joint_options.py), of three kinds:
    - $\mathit{single}(\delta)$: a demand $\delta$ of $j$'s class
    - $\mathit{multi}(\mu, n)$: $n \ge 2$ whole nodes of one definition of group $\mu$
    - stay: a running job keeps exactly its GPUs

**Parameters**

- $\tau_c$ worst tier of option $c$'s GPUs for $a_j$ (single: $t$ of its demand; multi: its
  group's $t$; stay: its GPUs')
- $g_c$ goodput at the best batch (models.efficiency.best_batch) with compute $\times \tau_c$,
  inter-node sync $\times B_{\mathit{ref}} / B_c$, and the whole step $\times$
  `across_node_factor` if spread
- $u_c$, $U0_j$, $s'_c$ utility, unallocated utility, penalized speedup as goodput.py (the fair
  share valued on a typical GPU: variability shows in the speedups)
- $d_\sigma = \sum_s m_{\sigma s}$ GPUs of slot $\sigma$; $n_c$ the whole nodes of a multi option
- $h_{kc}$ GPUs stay option $c$ holds on a homogeneous node $k$

**Variables**

- $x_c \in \{0, 1\}$: option $c$ is chosen
- $y_\sigma \in \{0, \dots, \bar y_\sigma\}$: jobs placed in slot $\sigma$, at most what its
  kind holds: $|K_f| \lfloor G_f / d_\sigma \rfloor$ on $f \in H$,
  $\sum_{w \in X_f} |K_w| \min_{s: m_{\sigma s} > 0} \lfloor n_s / m_{\sigma s} \rfloor$ on $f \in Q$
- $z_{ew} \in \{0, \dots, |K_w|\}$, $w \in E_e$: whole nodes of pool $w$ given to definition $e$
- $q_{en} \in \{0, \dots, \lfloor \sum_{w \in E_e} |K_w| / n \rfloor\}$, $n \in N_e$: jobs
  taking $n$ whole nodes of definition $e$
- $u_{w\pi} \in \{0, \dots, |K_w|\}$ ($\pi$ free) or $\{0, \dots, |K_b|\}$ ($\pi \in \Pi_b$):
  nodes of pool $w \in X$ shared out as pattern $\pi = (S, P)$: the running jobs at the
  positions $S$ keep their GPUs and the rest go to the parts $P$
- $w_{kd} \in \mathbb{Z}_{\ge 0}$: goodput.py's free $d$-slots of a homogeneous node with
  several stayers, $k \in K2_g$, $d \in L_g$
- $t$: max-min only, as goodput.py

**Objective** (as goodput.py)

$$
\max \; \sum_j U0_j + \sum_c \bigl(u_c - U0_{j(c)}\bigr) \, x_c
\qquad (\text{max-min: } + M t)
$$

**Constraints**

$$
\begin{aligned}
&\text{(one)}    && \sum_{c \in C_j} x_c \le 1
                 && j \in J \\
&\text{(demand)} && \sum_{c = \mathit{single}(\delta)} x_c \le \sum_{\sigma: \delta(\sigma) = \delta} y_\sigma
                 && \delta \in D \\
&\text{(level)}  && \sum_{\sigma \text{ on } g,\ d_\sigma \ge d} \frac{d_\sigma}{d} \, y_\sigma
                    + \frac{G_g}{d} \sum_{e} z_{eg}
                    + \sum_{k \in K1_g} \sum_{c \in S_k} \left\lceil \frac{h_{kc}}{d} \right\rceil x_c
                 && \\
&                && \quad - \sum_{k \in K2_g} w_{kd} \le |K_g \setminus K2_g| \, \frac{G_g}{d}
                 && g \in H,\ d \in L_g \\
&\text{(slots)}  && d \, w_{kd} + \sum_{c \in S_k} h_{kc} \, x_c \le G_g
                 && k \in K2_g,\ d \in L_g \\
&\text{(node)}   && \sum_{\pi \in \Pi_w} u_{w\pi} + \sum_e z_{ew} \le |K_w|
                 && w \in X \\
&\text{(lone)}   && \sum_{\pi \in \Pi_b} u_{w\pi} \le 1
                 && b \text{ a lone bin} \\
&\text{(stay)}   && \sum_{k \in K_b} x_{c_{ki}} \le \sum_{\pi = (S, P) \in \Pi_b:\ i \in S} u_{w\pi}
                 && b \in B_w,\ i \text{ a position of } b \\
&\text{(comp)}   && \sum_{\sigma \text{ on } f,\ m_\sigma = m} y_\sigma
                    \le \sum_{w \in X_f} \sum_{\pi \in \Pi_w} \mathit{cnt}_\pi(m) \, u_{w\pi}
                 && f \in Q,\ m \\
&\text{(whole)}  && \sum_{w \in E_e} z_{ew} = \sum_{n \in N_e} n \, q_{en}
                 && e \in E \\
&\text{(rack)}   && \sum_{e \in E_\mu:\ n \in N_e} q_{en} = \sum_{c = \mathit{multi}(\mu, n)} x_c
                 && \mu \in M,\ n \ge 2 \\
&\text{(minspd)} && t \le \sum_{c \in C_j} s'_c \, x_c
                 && j \in J \text{ (max-min)} \\
&\text{(pin)}    && x_c = 1
                 && c \text{ the stay option of a pinned job}
\end{aligned}
$$

(pin) holds a pinned job on its current GPUs: its stay is its only option
(options.pinned_stays), a column bound rather than a row.

**Why it is exact.** A single option is worth what its demand's size and tier give, and so is
every slot serving that demand, so (demand) lets any job take any such slot: matching the chosen
options to slots one by one realizes them, and every concrete single-node placement is some slot
(its node's kind, the job's class, its GPUs per slice). A heterogeneous node's GPUs of one slice
are interchangeable, and so are the nodes of one pool but for the jobs they run: every way to
share a node out among its running jobs, new jobs and a whole-node taker is one pattern or a
whole node, so counts of patterns per pool are its capacity. An integer point is realized node
by node: each node keeping a running job takes a pattern of its bin that keeps it ((stay): as
many as such nodes; a lone node one pattern, (lone), which so keeps all of its jobs that stay),
and every other pattern counted, free or held, a node of its pool that keeps none and is not
given whole, which (node) leaves enough of (a held pattern fits any node of its pool: what its
jobs leave is part of the node); the patterns' parts on the nodes of kind $f$ then take $f$'s
slots one by one (comp). Conversely each node of a placement is shared out by some pattern
(a maximal one holding its jobs). Stated by patterns and not by slice capacities, the
relaxation of one node's packing is its convex hull (slice rows let the LP place a third of a
3-GPU job on each of three nodes), and counting alike nodes' patterns loses nothing of it (the
counts split evenly over a bin's nodes). A homogeneous group is goodput.py's node group, slots
and whole nodes being items of its chain, so its (level) argument holds unchanged. (whole)
and (rack) give each definition as many whole nodes as its jobs take, and a multi option's jobs
to definitions of its group: every job's nodes lie in one definition, so within its scope and at
a tier no worse than its option's; the option with the realized tier and scope exists, so the
optimum over options is the optimum over concrete placements of these shapes. Decoding places
stayers, then each definition's whole nodes and its jobs, then slots matched to singles, largest
first on homogeneous groups (packing.py) and on heterogeneous nodes into the parts of the
patterns u gives them, as above: it never fails; the verifier checks anyway, and brute-force
tests over every placement check the optimum.

Smaller, still exact (joint_options.py): a larger node count of one multi-node group is kept
only if worth more than the smaller ones; a single option only if worth more than every smaller
one of its job, GPU type and tier that its GPUs could shrink to; a multi-node definition only at
the tiers where its eligible nodes grow. Freeze levels fold in as formulations/freezing.py
proves for goodput.py (`fold_freeze_levels`: each option at its best admissible level, the same
model size). Not modelled: links shared by several jobs (a spread's bandwidth is its own); a
spread over racks is priced at the smallest rack uplink of the cluster.

The relaxation, priced (MilpArrays.defer): an LP optimum seldom gives a job several whole
nodes, so LP first solves it without the multi-node options' x columns and prices them in
(solvers.highs_direct). Without them every z and q is 0 and the duals of (whole) and (rack) are
free; at their least values a multi option's reduced cost is
$u_c - U0_j - \pi_{\mathit{one}, j} - n \min_w \rho_w$, $\rho_w$ the LP's price of a whole node of
an eligible pool: the option pays only if n of the cheapest such nodes cost less than it is
worth. 2,048-GPU rounds: 15,000 of 39,000 columns out, none priced in (before pools of alike
nodes: of 50,000, the relaxation 485 -> 285 ms, mean of 8).
"""


from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from schedlab.formulations.freezing import fold_freeze_levels, has_freezing
from schedlab.formulations.goodput import max_min_upper, max_min_weight, min_job_speedup, objective_value
from schedlab.formulations.joint_decode import decode, greedy_point, max_min_point
from schedlab.formulations.joint_options import (
    MULTI,
    SINGLE,
    STAY,
    Demand,
    JointOptions,
    enumerate_joint_options,
)
from schedlab.formulations.joint_structure import Structure, offsets, part_counts, pool_patterns, structure
from schedlab.formulations.options import pinned_stays
from schedlab.milp import MilpArrays, OneModel, Rows, stack_rows
from schedlab.state import JobAllocation, RoundInput

if TYPE_CHECKING:
    import pyomo.environ as pyo

__all__ = ["JointModel", "allocation_objective", "build_arrays", "build_pyomo", "joint_model", "option_label",
           "start_point"]


def _constraints(opts: JointOptions, st: Structure) -> dict[str, Rows]:
    """Every constraint of the module docstring but (minspd) as the arrays' rows, by tag.

    The Pyomo twin writes them apart from the same algebra (build_pyomo), so that the two check
    each other.
    """
    cl, n, inf = opts.cluster, opts.num_options, math.inf
    at = offsets(opts, st)
    out = {tag: Rows() for tag in ("one", "demand", "level", "slots", "node", "lone", "stay", "comp", "whole", "rack")}
    jobs_with = np.unique(opts.job)
    out["one"].extend([(int(j),) for j in jobs_with], np.searchsorted(jobs_with, opts.job), np.arange(n),
                      np.ones(n), -inf, 1.0)
    single = np.flatnonzero(opts.kind == SINGLE)
    slot_demand = np.array([opts.slots[i].demand for i in st.y_cols], dtype=int)
    demand_row = np.searchsorted(st.demands, np.concatenate([opts.ref[single], slot_demand]))
    out["demand"].extend([(d,) for d in st.demands], demand_row,
                         np.concatenate([single, at.y + np.arange(len(st.y_cols))]),
                         np.concatenate([np.ones(len(single)), -np.ones(len(st.y_cols))]), -inf, 0.0)
    y_on: dict[int, list[int]] = {}  # kind -> its y
    for i, s in enumerate(st.y_cols):
        y_on.setdefault(opts.slots[s].kind, []).append(i)
    z_on: dict[int, list[int]] = {}
    for i, (_, p) in enumerate(st.z_cols):
        z_on.setdefault(p, []).append(at.z + i)
    w_index = {kd: at.w + i for i, kd in enumerate(st.w_cols)}
    for p, pool in enumerate(cl.pools):
        if not pool.homogeneous:
            continue
        G = pool.gpus_per_node
        ys, zs = y_on.get(pool.kind, []), z_on.get(p, [])
        size = np.array([opts.slots[st.y_cols[i]].gpus for i in ys], dtype=float)
        k2 = [k for k in pool.nodes if k in st.multi_stayer]
        k1 = [st.single_stayer[k] for k in pool.nodes if k in st.single_stayer]
        for d in pool.levels:
            big = size >= d
            cols = np.concatenate([at.y + np.asarray(ys, dtype=int)[big], zs, [c for c, _ in k1],
                                   [w_index[k, d] for k in k2]])
            vals = np.concatenate([size[big] / d, np.full(len(zs), G / d), [math.ceil(h / d) for _, h in k1],
                                   -np.ones(len(k2))])
            out["level"].add((p, d), cols, vals, -inf, (len(pool.nodes) - len(k2)) * G / d)
        for k in k2:
            for d in pool.levels:
                holders = st.multi_stayer[k]
                out["slots"].add((k, d), [w_index[k, d]] + [c for c, _ in holders],
                                 [float(d)] + [float(h) for _, h in holders], -inf, float(G))
    _pattern_rows(opts, st, out)
    z_def = np.array([e for e, _ in st.z_cols], dtype=int)
    q_def = np.array([e for e, _ in st.q_cols], dtype=int)
    q_n = np.array([n for _, n in st.q_cols], dtype=float)
    defs = np.unique(z_def)
    out["whole"].extend([(int(e),) for e in defs], np.searchsorted(defs, np.concatenate([z_def, q_def])),
                        np.concatenate([at.z + np.arange(len(z_def)), at.q + np.arange(len(q_def))]),
                        np.concatenate([np.ones(len(z_def)), -q_n]), 0.0, 0.0)
    multi = np.flatnonzero(opts.kind == MULTI)
    row_of = {gn: r for r, gn in enumerate(st.rack_rows)}
    q_group = [opts.multi[e].group for e, _ in st.q_cols]
    out["rack"].extend(list(st.rack_rows),
                       np.array([row_of[g, n] for g, n in zip(q_group, q_n.astype(int).tolist())]
                                + [row_of[g, n] for g, n in zip(opts.ref[multi].tolist(),
                                                                opts.num_nodes[multi].tolist())], dtype=int),
                       np.concatenate([at.q + np.arange(len(q_def)), multi]),
                       np.concatenate([np.ones(len(q_def)), -np.ones(len(multi))]), 0.0, 0.0)
    return out


def _pattern_rows(opts: JointOptions, st: Structure, out: dict[str, Rows]) -> None:
    """(node), (lone), (stay) and (comp) of the heterogeneous pools, each block in one call."""
    cl, at, inf = opts.cluster, offsets(opts, st), math.inf
    het = [p for p, pool in enumerate(cl.pools) if not pool.homogeneous]
    u_pool = np.array([p for p, _, _, _ in st.u_cols], dtype=int)
    u_bin = np.array([b for _, b, _, _ in st.u_cols], dtype=int)
    z_pool = np.array([p for _, p in st.z_cols], dtype=int)
    taken = np.isin(z_pool, het)
    node_row = {p: r for r, p in enumerate(het)}
    cols = np.concatenate([at.u + np.arange(len(u_pool)), at.z + np.flatnonzero(taken)]).astype(int)
    pools = np.concatenate([u_pool, z_pool[taken]])
    out["node"].extend([(p,) for p in het], np.array([node_row[p] for p in pools.tolist()], dtype=int), cols,
                       np.ones(len(cols)), -inf, np.array([float(len(cl.pools[p].nodes)) for p in het]))
    lone = [b for b, bin_ in enumerate(st.bins) if bin_.lone]
    lone_row = {b: r for r, b in enumerate(lone)}
    held = np.flatnonzero(np.isin(u_bin, lone))
    out["lone"].extend([(b,) for b in lone], np.array([lone_row[b] for b in u_bin[held].tolist()], dtype=int),
                       at.u + held, np.ones(len(held)), -inf, 1.0)
    stays = [(b, i) for b, bin_ in enumerate(st.bins) for i in range(len(bin_.holds))]
    stay_row = {bi: r for r, bi in enumerate(stays)}
    holding = [(stay_row[b, i], at.u + col) for col, (_, b, kept, _) in enumerate(st.u_cols) for i in kept]
    stayers = [(stay_row[b, i], c) for b, bin_ in enumerate(st.bins) for on_node in bin_.stayers for i, c in enumerate(on_node)]
    out["stay"].extend(stays, np.array([r for r, _ in holding] + [r for r, _ in stayers], dtype=int),
                       np.array([col for _, col in holding] + [c for _, c in stayers], dtype=int),
                       np.concatenate([-np.ones(len(holding)), np.ones(len(stayers))]), -inf, 0.0)
    comp_row = {fm: r for r, fm in enumerate(st.comp_rows)}
    y_rows = [(comp_row[opts.slots[s].kind, opts.slots[s].comp], at.y + i) for i, s in enumerate(st.y_cols)
              if (opts.slots[s].kind, opts.slots[s].comp) in comp_row]
    parts = [(comp_row[cl.pools[p].kind, m], at.u + i, -float(k)) for i, (p, _, _, pattern) in enumerate(st.u_cols)
             for m, k in part_counts(pattern)]
    out["comp"].extend(list(st.comp_rows), np.array([r for r, _ in y_rows] + [r for r, _, _ in parts], dtype=int),
                       np.array([c for _, c in y_rows] + [c for _, c, _ in parts], dtype=int),
                       np.array([1.0] * len(y_rows) + [k for _, _, k in parts]), -inf, 0.0)


def _columns(opts: JointOptions, st: Structure) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Objective coefficients, upper bounds and integrality of x, y, z, q, w, u, then t (max-min).

    A slot holds at most what its kind's nodes can (Slot.most); a free pattern is taken by at
    most every node of its pool, a bin's by at most every node of the bin.
    """
    cl, n = opts.cluster, opts.num_options
    max_min = opts.round_input.settings.max_min
    c = np.concatenate([opts.utility - opts.U0[opts.job], np.zeros(st.num_cols)])
    hi = np.concatenate([np.ones(n), [float(opts.slots[i].most) for i in st.y_cols],
                         [float(len(cl.pools[p].nodes)) for _, p in st.z_cols],
                         [float(opts.multi[e].nodes // m) for e, m in st.q_cols],
                         [cl.pools[cl.pool_of[k]].gpus_per_node // d for k, d in st.w_cols],
                         [float(len(cl.pools[p].nodes) if b < 0 else len(st.bins[b].nodes)) for p, b, _, _ in st.u_cols]])
    integer = np.ones(len(c), dtype=bool)
    if max_min:
        c = np.append(c, max_min_weight(opts))
        hi = np.append(hi, max_min_upper(opts))
        integer = np.append(integer, False)
    return c, hi, integer


def start_point(opts: JointOptions, st: Structure) -> np.ndarray:
    """The warm start: every running job stays.

    x_c = 1 for the stay options; y, z, q = 0; each w_kd the free d-slots its node's stayers
    leave, floor((G_g - sum h_kc) / d); every node of a bin takes the bin's first pattern that
    keeps all its stayers; t (max-min) the smallest penalized speedup of that point.
    """
    at = offsets(opts, st)
    v = np.zeros(at.end + opts.round_input.settings.max_min)
    for j in opts.stay_gpus:
        v[opts.stay_option(j)] = 1.0
    for i, (k, d) in enumerate(st.w_cols):
        G = opts.cluster.pools[opts.cluster.pool_of[k]].gpus_per_node
        v[at.w + i] = (G - sum(h for _, h in st.multi_stayer[k])) // d
    seen = set()
    for i, (_, b, stay, _) in enumerate(st.u_cols):
        if b >= 0 and b not in seen and len(stay) == len(st.bins[b].holds):
            v[at.u + i] = len(st.bins[b].nodes)
            seen.add(b)
    if opts.round_input.settings.max_min:
        v[-1] = min_job_speedup(opts, v[: opts.num_options])
    return v


def _minspd(opts: JointOptions, t: int) -> Rows:
    """(minspd): t - sum_{c in C_j} s'_c x_c <= 0 for every job (max-min)."""
    block = Rows()
    for j in range(opts.num_jobs):
        mine = np.flatnonzero(opts.job == j)
        block.add((j,), np.concatenate([[t], mine]), np.concatenate([[1.0], -opts.penalized_speedup[mine]]),
                  -math.inf, 0.0)
    return block


def build_arrays(opts: JointOptions, st: Structure) -> MilpArrays:
    """The model as arrays for highspy and CP-SAT.

    Columns: x, then y (Structure.y_cols), z, q, w, u, then t (max-min). The objective's constant
    is sum_j U0_j; rows are (one), (demand), (level), (slots), (node), (stay), (comp), (whole),
    (rack), then (minspd) under max-min. The warm start is `start_point`'s. `choice` gives LP first's
    neighbourhood units: an option's job; a pool's slots, patterns and whole nodes; a
    definition's q; w and t none (free in every neighbourhood). The multi-node options' x are
    deferred, (whole) then (rack) the rows whose least duals price them (module docstring), and
    where the jobs are at most the GPUs the relaxation starts from every job's best option ((one)
    the `one_rows`, `crash`; where most jobs get nothing HiGHS's own start is closer: 64 GPUs, 96 jobs:
    390 dual simplex iterations from every job's best, 285 from HiGHS's; 2,048 GPUs, 1,000 jobs:
    3,200 against 4,800), unscaled (`scaled`: 8 relaxations of 2,048 GPUs 133 -> 109 ms).
    """
    c, col_hi, integer = _columns(opts, st)
    blocks = _constraints(opts, st)
    if opts.round_input.settings.max_min:
        blocks["minspd"] = _minspd(opts, len(c) - 1)
    A, lo, hi = stack_rows(list(blocks.values()), len(c))
    first = dict(zip(blocks, np.cumsum([0] + [len(b) for b in blocks.values()]).tolist()))
    cl, at, jobs = opts.cluster, offsets(opts, st), opts.num_jobs
    pools, kinds = len(cl.pools), len(cl.kinds)
    # LP first's neighbourhood units: jobs, pools, heterogeneous kinds (their slots), definitions
    kind_unit = np.array([jobs + (kind.pools[0] if kind.homogeneous else pools + f) for f, kind in enumerate(cl.kinds)])
    choice = np.full(len(c), -1)
    choice[: opts.num_options] = opts.job
    choice[at.y: at.z] = kind_unit[[opts.slots[s].kind for s in st.y_cols]]
    choice[at.z: at.q] = [jobs + p for _, p in st.z_cols]
    choice[at.q: at.w] = [jobs + pools + kinds + e for e, _ in st.q_cols]
    choice[at.u: at.end] = [jobs + p for p, _, _, _ in st.u_cols]
    col_lo = np.zeros(len(c))
    col_lo[pinned_stays(opts)] = 1.0  # (pin)
    return MilpArrays(c=c, offset=float(opts.U0.sum()), A=A, row_lo=lo, row_hi=hi,
                      col_lo=col_lo, col_hi=col_hi, integer=integer, start=start_point(opts, st),
                      choice=choice, defer=np.concatenate([opts.kind == MULTI, np.zeros(len(c) - opts.num_options, bool)]),
                      least_dual_rows=tuple(first[tag] + np.arange(len(blocks[tag])) for tag in ("whole", "rack")),
                      one_rows=np.arange(len(blocks["one"])), crash=opts.num_jobs <= opts.round_input.cluster.total_gpus,
                      scaled=False)


@dataclass(frozen=True)
class _Names:
    """The module docstring's sets over names, found from the options alone.

    Not from Structure or the arrays' rows: options are (job id, option) labels, pools "p0",
    "p1", ..., kinds "f0", "f1", ..., slots (kind, class, composition), definitions "e0",
    "e1", ..., bins "b" and their first node's id, nodes their ids.
    """

    options: list[tuple[str, str]]  # C, in the arrays' column order
    options_of: dict[str, list[tuple[str, str]]]  # C_j, every job (empty: no option)
    singles: dict[int, list[tuple[str, str]]]  # demand -> its single options
    slots: dict[int, list[tuple[str, str, str]]]  # demand -> its slots, by name
    slot_comp: dict[tuple[str, str, str], tuple[int, ...]]  # slot -> m, in the arrays' column order
    on_kind: dict[str, list[tuple[str, str, str]]]  # kind -> its slots
    multis: dict[tuple[int, int], list[tuple[str, str]]]  # (group, n) -> its multi options
    defs: dict[str, tuple[str, ...]]  # e -> E_e, the definitions of the groups named
    counts: dict[str, tuple[int, ...]]  # e -> the n of N_e some option of its group takes
    group_defs: dict[tuple[int, int], list[str]]  # (group, n) -> the definitions with n in N_e
    takers: dict[str, list[str]]  # pool -> the definitions it is in
    held: dict[str, dict[tuple[str, str], int]]  # homogeneous node k -> S_k as {stay option: h_kc}
    bins: dict[str, tuple[str, tuple[tuple[int, ...], ...], list[list[tuple[str, str]]]]]  # b -> (pool, h_i, stayers per node)
    patterns: list[tuple[str, str, str, str]]  # Pi_w: (pool, bin ("" free), S as "+"-joined positions, P)
    stays_in: dict[tuple[str, str, str, str], tuple[int, ...]]  # u -> S
    parts: dict[tuple[str, str, str, str], tuple[tuple[int, ...], ...]]  # u -> P
    K2L: list[tuple[str, int]]  # (k, d): k in K2_g, d in L_g, in the arrays' column order


def _names(opts: JointOptions) -> _Names:
    """The docstring's sets over names (`_Names`), from the options and the cluster's pools."""
    cl, jobs, nodes = opts.cluster, opts.round_input.jobs, opts.round_input.cluster.nodes
    labels = [option_label(opts, c) for c in range(opts.num_options)]
    column = {label: c for c, label in enumerate(labels)}
    node_id = [node.id for node in nodes]
    options_of: dict[str, list[tuple[str, str]]] = {job.id: [] for job in jobs}
    for label in labels:
        options_of[label[0]].append(label)
    singles: dict[int, list[tuple[str, str]]] = {}
    for c in np.flatnonzero(opts.kind == SINGLE).tolist():
        singles.setdefault(int(opts.ref[c]), []).append(labels[c])
    slots: dict[int, list[tuple[str, str, str]]] = {}
    slot_comp: dict[tuple[str, str, str], tuple[int, ...]] = {}  # in the arrays' column order
    on_kind: dict[str, list[tuple[str, str, str]]] = {}
    for slot in opts.slots:
        if slot.demand in singles:
            name = (f"f{slot.kind}", cl.classes[slot.cls], "x".join(map(str, slot.comp)))
            slots.setdefault(slot.demand, []).append(name)
            slot_comp[name] = slot.comp
            on_kind.setdefault(f"f{slot.kind}", []).append(name)
    multis: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for c in np.flatnonzero(opts.kind == MULTI).tolist():
        multis.setdefault((int(opts.ref[c]), int(opts.num_nodes[c])), []).append(labels[c])
    defs: dict[str, tuple[str, ...]] = {}
    counts: dict[str, tuple[int, ...]] = {}
    takers: dict[str, list[str]] = {}
    group_defs: dict[tuple[int, int], list[str]] = {}
    for g in sorted({g for g, _ in multis}):
        for e in opts.groups[g].defs:
            e_name = f"e{e}"
            defs[e_name] = tuple(f"p{p}" for p in opts.multi[e].pools)
            counts[e_name] = tuple(n for n in opts.multi[e].counts if (g, n) in multis)
            for n in counts[e_name]:
                group_defs.setdefault((g, n), []).append(e_name)
            for p in defs[e_name]:
                takers.setdefault(p, []).append(e_name)
    held: dict[str, dict[tuple[str, str], int]] = {}
    held_het: dict[int, dict[tuple[str, str], tuple[int, ...]]] = {}  # heterogeneous node -> {stay option: h_kc.}
    for j, on in opts.stay_gpus.items():
        stay = labels[opts.stay_option(j)]
        for k, gpus in on.items():
            if cl.pools[cl.pool_of[k]].homogeneous:
                held.setdefault(node_id[k], {})[stay] = len(gpus)
            else:
                held_het.setdefault(k, {})[stay] = tuple(len(set(gpus) & set(members)) for members in cl.slices_of[k])
    bins: dict[str, tuple[str, tuple[tuple[int, ...], ...], list[list[tuple[str, str]]]]] = {}
    alike: dict[tuple[int, tuple[int, ...]], str] = {}  # (pool, h) -> the bin of its nodes with one stayer
    for k in sorted(held_het):
        stays = sorted(held_het[k], key=column.__getitem__)  # positions in column order
        if len(stays) > 1:
            bins[f"b{node_id[k]}"] = (f"p{cl.pool_of[k]}", tuple(held_het[k][c] for c in stays), [stays])
            continue
        b = alike.setdefault((cl.pool_of[k], held_het[k][stays[0]]), f"b{node_id[k]}")
        bins.setdefault(b, (f"p{cl.pool_of[k]}", (held_het[k][stays[0]],), []))[2].append(stays)
    used: dict[str, frozenset[tuple[int, ...]]] = {f: frozenset(slot_comp[s] for s in mine) for f, mine in on_kind.items()}
    patterns: list[tuple[str, str, str, str]] = []
    stays_in: dict[tuple[str, str, str, str], tuple[int, ...]] = {}
    parts: dict[tuple[str, str, str, str], tuple[tuple[int, ...], ...]] = {}
    for index, het in enumerate(cl.pools):
        if het.homogeneous:
            continue
        mine = used.get(f"f{het.kind}", frozenset())
        for b, holds in [("", ())] + [(b, holds) for b, (w, holds, _) in bins.items() if w == f"p{index}"]:
            for kept, pattern in pool_patterns(het.shape, holds, mine):
                if bool(kept) == bool(b):  # a bin's patterns keep one of its stayers at least; free ones none
                    u = (f"p{index}", b, "+".join(map(str, kept)), "|".join("x".join(map(str, m)) for m in pattern))
                    patterns.append(u)
                    stays_in[u] = kept
                    parts[u] = pattern
    K2L = [(node_id[k], d) for k, node in enumerate(nodes) if len(held.get(node.id, {})) > 1
           for d in cl.pools[cl.pool_of[k]].levels]
    return _Names(labels, options_of, singles, slots, slot_comp, on_kind, multis, defs, counts, group_defs, takers,
                  held, bins, patterns, stays_in, parts, K2L)


def build_pyomo(opts: JointOptions) -> pyo.ConcreteModel:
    """The same model in Pyomo, written constraint by constraint from the module docstring.

    It is written over the sets of `_names` (not from the arrays' rows, so that the two builds
    check each other) and indexed by names: x[job id, option] (option_label), y[kind, class,
    composition], z[e, pool], q[e, n], w[node id, d], u[pool, bin, S, P]; (one) and (minspd) by job id,
    (demand) by demand, (level) by (pool, d), (slots) as w, (node) by pool, (lone) by bin, (stay)
    by (bin, position), (comp) by (kind, composition), (whole) by definition,
    (rack) by (group, n). The parameters a customization reads are goodput's, over the same
    (job id, option) pairs C: gpus[c] (a_c), nodes[c] (n_c), speedup[c] (s'_c), utility[c]
    (u_c); and U0[j] over J. `model.columns` lists x, y, z, q, w, u and t in the arrays' column order.
    """
    import pyomo.environ as pyo  # here, not at the top: rounds solved from arrays never load Pyomo

    cl, nm = opts.cluster, _names(opts)
    labels = nm.options
    pools = {f"p{p}": pool for p, pool in enumerate(cl.pools)}
    kinds = {f"f{f}": kind for f, kind in enumerate(cl.kinds)}
    node_pool = {opts.round_input.cluster.nodes[k].id: f"p{p}" for k, p in cl.pool_of.items()}
    m = pyo.ConcreteModel(name="joint")
    m.J = pyo.Set(initialize=list(nm.options_of), ordered=True)
    m.C = pyo.Set(dimen=2, initialize=labels, ordered=True)
    m.D = pyo.Set(initialize=sorted(nm.singles), ordered=True)
    m.Y = pyo.Set(dimen=3, initialize=list(nm.slot_comp), ordered=True)
    m.Z = pyo.Set(dimen=2, initialize=[(e, p) for e, members in nm.defs.items() for p in members], ordered=True)
    m.Q = pyo.Set(dimen=2, initialize=[(e, n) for e, ns in nm.counts.items() for n in ns], ordered=True)
    m.E = pyo.Set(initialize=list(nm.defs), ordered=True)
    m.R = pyo.Set(dimen=2, initialize=sorted(nm.multis), ordered=True)
    m.HL = pyo.Set(dimen=2, initialize=[(g, d) for g, pool in pools.items() if pool.homogeneous for d in pool.levels],
                   ordered=True)
    m.K2L = pyo.Set(dimen=2, initialize=nm.K2L, ordered=True)
    m.X = pyo.Set(initialize=[g for g, pool in pools.items() if not pool.homogeneous], ordered=True)
    m.U = pyo.Set(dimen=4, initialize=nm.patterns, ordered=True)
    m.BL = pyo.Set(initialize=[b for b, (_, holds, _) in nm.bins.items() if len(holds) > 1], ordered=True)
    m.BI = pyo.Set(dimen=2, initialize=[(b, i) for b, (_, holds, _) in nm.bins.items() for i in range(len(holds))],
                   ordered=True)
    m.XM = pyo.Set(dimen=2, initialize=sorted({(name[0], name[2]) for name in nm.slot_comp
                                               if not kinds[name[0]].homogeneous}), ordered=True)
    m.gpus = pyo.Param(m.C, initialize=dict(zip(labels, opts.num_gpus.tolist())))
    m.nodes = pyo.Param(m.C, initialize=dict(zip(labels, opts.num_nodes.tolist())))
    m.speedup = pyo.Param(m.C, initialize=dict(zip(labels, opts.penalized_speedup.tolist())))
    m.utility = pyo.Param(m.C, initialize=dict(zip(labels, opts.utility.tolist())))
    m.U0 = pyo.Param(m.J, initialize=dict(zip(nm.options_of, opts.U0.tolist())))
    size = {g: len(members) for g, members in _members(opts).items()}
    nodes_of = {e: sum(size[p] for p in members) for e, members in nm.defs.items()}

    def y_most(m, f, cls, comp):
        kind, m_s = kinds[f], nm.slot_comp[f, cls, comp]
        return 0, sum(size[f"p{p}"] for p in kind.pools) * min(n // k for n, k in zip(kind.shape, m_s) if k)

    def u_most(m, g, b, stay, parts):
        return 0, len(nm.bins[b][2]) if b else size[g]

    m.x = pyo.Var(m.C, domain=pyo.Binary)
    for c in pinned_stays(opts).tolist():  # (pin)
        m.x[nm.options[c]].setlb(1)
    m.y = pyo.Var(m.Y, domain=pyo.NonNegativeIntegers, bounds=y_most)
    m.z = pyo.Var(m.Z, domain=pyo.NonNegativeIntegers, bounds=lambda m, e, g: (0, size[g]))
    m.q = pyo.Var(m.Q, domain=pyo.NonNegativeIntegers, bounds=lambda m, e, n: (0, nodes_of[e] // n))
    m.w = pyo.Var(m.K2L, domain=pyo.NonNegativeIntegers)
    m.u = pyo.Var(m.U, domain=pyo.NonNegativeIntegers, bounds=u_most)
    skip = pyo.Constraint.Skip  # a row with no variable bounds nothing (and Pyomo refuses it)

    def one(m, j):
        return sum(m.x[c] for c in nm.options_of[j]) <= 1 if nm.options_of[j] else skip

    def demand(m, d):
        return sum(m.x[c] for c in nm.singles[d]) <= sum(m.y[s] for s in nm.slots.get(d, []))

    def level(m, g, d):
        K = [k for k, p in node_pool.items() if p == g]
        K1 = [k for k in K if len(nm.held.get(k, {})) == 1]
        K2 = [k for k in K if len(nm.held.get(k, {})) > 1]
        G = pools[g].gpus_per_node
        terms = ([sum(nm.slot_comp[s]) / d * m.y[s] for s in nm.on_kind.get(f"f{pools[g].kind}", [])
                  if sum(nm.slot_comp[s]) >= d]
                 + [G / d * m.z[e, g] for e in nm.takers.get(g, [])]
                 + [math.ceil(h / d) * m.x[c] for k in K1 for c, h in nm.held[k].items()]
                 + [-m.w[k, d] for k in K2])
        return sum(terms) <= (len(K) - len(K2)) * G / d if terms else skip

    def slots(m, k, d):
        return d * m.w[k, d] + sum(h * m.x[c] for c, h in nm.held[k].items()) <= pools[node_pool[k]].gpus_per_node

    def node(m, g):
        terms = [m.u[u] for u in nm.patterns if u[0] == g] + [m.z[e, g] for e in nm.takers.get(g, [])]
        return sum(terms) <= size[g] if terms else skip

    def lone(m, b):
        return sum(m.u[u] for u in nm.patterns if u[1] == b) <= 1

    def stay(m, b, i):
        return (sum(m.x[on_node[i]] for on_node in nm.bins[b][2])
                <= sum(m.u[u] for u in nm.patterns if u[1] == b and i in nm.stays_in[u]))

    def comp(m, f, parts):
        mc = tuple(int(k) for k in parts.split("x"))
        return (sum(m.y[s] for s in nm.on_kind.get(f, []) if nm.slot_comp[s] == mc)
                <= sum(nm.parts[u].count(mc) * m.u[u] for u in nm.patterns if pools[u[0]].kind == int(f[1:])))

    def whole(m, e):
        return sum(m.z[e, p] for p in nm.defs[e]) == sum(n * m.q[e, n] for n in nm.counts[e])

    def rack(m, g, n):
        return sum(m.q[e, n] for e in nm.group_defs[g, n]) == sum(m.x[c] for c in nm.multis[g, n])

    m.one = pyo.Constraint(m.J, rule=one)
    m.demand = pyo.Constraint(m.D, rule=demand)
    m.level = pyo.Constraint(m.HL, rule=level)
    m.slots = pyo.Constraint(m.K2L, rule=slots)
    m.node = pyo.Constraint(m.X, rule=node)
    m.lone = pyo.Constraint(m.BL, rule=lone)
    m.stay = pyo.Constraint(m.BI, rule=stay)
    m.comp = pyo.Constraint(m.XM, rule=comp)
    m.whole = pyo.Constraint(m.E, rule=whole)
    m.rack = pyo.Constraint(m.R, rule=rack)
    p_mean = sum(m.U0[j] for j in m.J) + sum((m.utility[c] - m.U0[c[0]]) * m.x[c] for c in m.C)
    m.columns = ([m.x[c] for c in m.C] + [m.y[s] for s in m.Y] + [m.z[ep] for ep in m.Z] + [m.q[en] for en in m.Q]
                 + [m.w[kd] for kd in m.K2L] + [m.u[u] for u in m.U])
    if opts.round_input.settings.max_min:
        m.t = pyo.Var(domain=pyo.NonNegativeReals, bounds=(0, max_min_upper(opts)))
        m.minspd = pyo.Constraint(m.J, rule=lambda m, j: m.t <= sum(m.speedup[c] * m.x[c] for c in nm.options_of[j]))
        m.obj = pyo.Objective(expr=max_min_weight(opts) * m.t + p_mean, sense=pyo.maximize)
        m.columns.append(m.t)
    else:
        m.obj = pyo.Objective(expr=p_mean, sense=pyo.maximize)
    return m


def _members(opts: JointOptions) -> dict[str, list[str]]:
    """K_w by name: each pool's node ids."""
    nodes = opts.round_input.cluster.nodes
    return {f"p{p}": [nodes[k].id for k in pool.nodes] for p, pool in enumerate(opts.cluster.pools)}


def option_label(opts: JointOptions, c: int) -> tuple[str, str]:
    """The name of option c in the Pyomo model: (job id, option).

    The option is "stay", or its kind and shape: "single:V100:2@1.3" is 2 GPUs of type V100 on
    one node at worst tier 1.3 (its demand, the job's class being known), "multi1:n2" 2 whole
    nodes of one definition of multi-node group 1.
    """
    job = opts.round_input.jobs[opts.job[c]].id
    kind = int(opts.kind[c])
    if kind == STAY:
        return job, "stay"
    if kind == MULTI:
        return job, f"multi{int(opts.ref[c])}:n{int(opts.num_nodes[c])}"
    demand = opts.demands[opts.ref[c]]
    return job, f"single:{demand.gpu_type}:{demand.gpus}@{demand.tau:.12g}"


@dataclass(frozen=True)
class JointModel(OneModel):
    """The joint round as one MILP (schedlab.milp.RoundModel): its options and index sets."""

    opts: JointOptions
    st: Structure

    @property
    def round_input(self) -> RoundInput:
        """The round the options were enumerated from."""
        return self.opts.round_input

    def arrays(self) -> MilpArrays:
        """The model as arrays (`build_arrays`), warm-started with every running job staying."""
        return build_arrays(self.opts, self.st)

    def pyomo(self) -> pyo.ConcreteModel:
        """The same model in Pyomo, indexed by names (`build_pyomo`)."""
        return build_pyomo(self.opts)

    def start(self) -> np.ndarray:
        """The warm start: every running job stays (`start_point`)."""
        return start_point(self.opts, self.st)

    def decode(self, values: np.ndarray) -> tuple[JobAllocation, ...]:
        """Every job's GPUs and batch at a point (`decode`); DecodeError if it does not decode."""
        return decode(self.opts, self.st, values)

    def objective(self, values: np.ndarray) -> float:
        """The objective of a point's chosen options, as goodput.py values it (p-mean, + M t under max-min)."""
        return objective_value(self.opts, np.asarray(values[: self.opts.num_options]) > 0.5)

    def fallback(self) -> np.ndarray:
        """A feasible point found greedily (`greedy_point`), under max-min the better of it and the
        floor at which every job is served (`max_min_point`): the answer when a solver has none."""
        values = greedy_point(self.opts, self.st)
        if self.opts.round_input.settings.max_min and (served := max_min_point(self.opts, self.st)) is not None:
            if self.objective(served) > self.objective(values):
                return served
        return values


def allocation_objective(opts: JointOptions, allocations: tuple[JobAllocation, ...]) -> float:
    """The model's objective for any allocation of the round (e.g. a partitioned answer): each
    job's GPUs read as its option (staying; a single option of their size and worst tier; or a
    multi option of their node count, worst tier and scope). opts should be enumerated with
    prune=False so that every option is there. KeyError if one is not."""
    ri, cl = opts.round_input, opts.cluster
    node_index = ri.cluster.node_index
    index = {(int(j), int(k), int(r), int(n)): c
             for c, (j, k, r, n) in enumerate(zip(opts.job, opts.kind, opts.ref, opts.num_nodes))}
    demand_of = {d: e for e, d in enumerate(opts.demands)}
    group_of = {(g.cls, g.gpu_type, g.gpus_per_node, g.tau, g.sync_scale, g.spans): i
                for i, g in enumerate(opts.groups)}
    chosen = np.zeros(opts.num_options, dtype=bool)
    for j, (job, alloc) in enumerate(zip(ri.jobs, allocations)):
        if not alloc.gpus:
            continue
        if set(alloc.gpus) == set(job.current_gpus):
            chosen[opts.stay_option(j)] = True
            continue
        a = cl.classes.index(job.variability_class)
        nodes = sorted({node_index[g.node] for g in alloc.gpus})
        tau = max(cl.gpu_tier[node_index[g.node], g.gpu][a] for g in alloc.gpus)
        gpu_type = ri.cluster.nodes[nodes[0]].gpu_type
        if len(nodes) == 1:
            chosen[index[j, SINGLE, demand_of[Demand(a, gpu_type, len(alloc.gpus), tau)], 1]] = True
            continue
        worst = max(cl.pools[cl.pool_of[k]].worst(a) for k in nodes)
        racks = {cl.rack_of[k] for k in nodes}
        scale = cl.cross_rack_scale if len(racks) > 1 else cl.rack_scale[next(iter(racks))]
        group = group_of[a, gpu_type, ri.cluster.nodes[nodes[0]].gpus, worst, scale, len(racks) > 1]
        chosen[index[j, MULTI, group, len(nodes)]] = True
    return objective_value(opts, chosen)


def joint_model(round_input: RoundInput) -> JointModel:
    """The joint round's model (FORMULATIONS["joint"]): its options, pruned, and their index sets.

    When a job opts in to freezing, the freeze levels are folded into the options
    (formulations.freezing), which prunes them itself.
    """
    if has_freezing(round_input):
        opts = fold_freeze_levels(round_input, enumerate_joint_options(round_input, prune=False))
    else:
        opts = enumerate_joint_options(round_input)
    return JointModel(opts, structure(opts))
