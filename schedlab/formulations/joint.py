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

**Sets**

- $J$ jobs, $a_j$ the variability class of job $j$; $S$ the GPU signatures: a GPU's tier in
  every class in play
- $H$ homogeneous node groups: nodes of one GPU type, size $G_g$, rack and signature (every GPU
  of the node alike); $K_g$ its nodes; $L_g = \mathit{chain\_levels}(G_g)$; $S_k$, $K1_g$,
  $K2_g$ as goodput.py (the stay options holding GPUs on node $k$; the nodes of $g$ with
  exactly one / several)
- $X$ heterogeneous nodes (GPUs of several signatures), each alone; $\mathit{Sl}_k$ its slices
  (its GPUs of one signature), $n_{ks}$ GPUs in slice $s$
- $W = H \cup X$ pools of whole nodes; $|K_w|$ nodes, worst factor $\tau_{wa}$ over its GPUs
- $C_j$ options of job $j$ (joint_options.py), of four kinds:
    - $\mathit{single}(g, d)$: $d \in L_g$ GPUs on one node of $g \in H$
    - $\mathit{comp}(k, m)$: $m_s$ GPUs of each slice $s$ of $k \in X$, any total $\ge 1$
    - $\mathit{multi}(n, t, R)$: $n \ge 2$ whole nodes of one GPU type and size, from the pools
      $E_c = \{w : \tau_{w a_j} \le t,\ \mathit{rack}(w) \in R\}$, $R$ one rack or all
    - stay: a running job keeps exactly its GPUs
- $V$ the pairs $(j, w)$ with $w \in E_c$ for a multi option $c$ of $j$ (the sums over $v$
  below run over $V$)

**Parameters**

- $\tau_c$ worst factor of option $c$'s GPUs for $a_j$ (single: the group's; comp: the worst
  slice used; multi: $t$; stay: its GPUs')
- $g_c$ goodput at the best batch (models.efficiency.best_batch) with compute $\times \tau_c$,
  inter-node sync $\times B_{\mathit{ref}} / B_c$, and the whole step $\times$
  `across_node_factor` if spread
- $u_c$, $U0_j$, $s'_c$ utility, unallocated utility, penalized speedup as goodput.py (the fair
  share valued on a typical GPU: variability shows in the speedups)
- $a_c$, $z_c$ GPUs and GPUs per node of $\mathit{single}(g, d)$ ($a_c = z_c = d$); $n_c$ the
  whole nodes of a multi option; $m_{cs}$ the GPUs of slice $s$ composition $c$ takes
- $h_{kc}$ GPUs stay option $c$ holds on a homogeneous node $k$; $h_{kcs}$ on slice $s$ of
  $k \in X$

**Variables**

- $x_c \in \{0, 1\}$: option $c$ is chosen
- $v_{jw} \in \mathbb{Z}_{\ge 0}$, $(j, w) \in V$: whole nodes of pool $w$ that job $j$ takes
  (for its multi option), at most $|K_w|$
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
&\text{(level)}  && \sum_{c \text{ single in } g,\ z_c \ge d} \frac{a_c}{d} \, x_c
                    + \frac{G_g}{d} \sum_j v_{jg}
                    + \sum_{k \in K1_g} \sum_{c \in S_k} \left\lceil \frac{h_{kc}}{d} \right\rceil x_c
                 && \\
&                && \quad - \sum_{k \in K2_g} w_{kd} \le |K_g \setminus K2_g| \, \frac{G_g}{d}
                 && g \in H,\ d \in L_g \\
&\text{(slots)}  && d \, w_{kd} + \sum_{c \in S_k} h_{kc} \, x_c \le G_g
                 && k \in K2_g,\ d \in L_g \\
&\text{(slice)}  && \sum_{c \text{ comp on } k} m_{cs} \, x_c + \sum_{c \text{ stay}} h_{kcs} \, x_c
                    + n_{ks} \sum_j v_{jk} \le n_{ks}
                 && k \in X,\ s \in \mathit{Sl}_k \\
&\text{(pool)}   && \sum_w v_{jw} = \sum_{c \text{ multi of } j} n_c \, x_c
                 && j \in J \\
&\text{(elig)}   && v_{jw} \le |K_w| \sum_{c \text{ multi of } j,\ w \in E_c} x_c
                 && (j, w) \in V \\
&\text{(minspd)} && t \le \sum_{c \in C_j} s'_c \, x_c
                 && j \in J \text{ (max-min)}
\end{aligned}
$$

**Why it is exact.** By (one) a job takes at most one option, so (elig) lets $v_{j\cdot}$ use
only the pools of its chosen multi option and (pool) makes them $n_c$ whole nodes: the option's
value is a lower bound of what those nodes give (their worst factor $\le t$, their racks in
$R$), and the option with $t$ and $R$ equal to the realized ones exists, so the optimum over
options is the optimum over concrete placements of these shapes. A heterogeneous node is one
bin whose GPUs of one slice are interchangeable: (slice) is exactly its capacity, a whole node
taking all of it. A homogeneous group is goodput.py's node group, whole nodes being items of
size $G_g$ in its chain, so its (level) argument holds unchanged. Decoding places stayers, then
whole nodes, then single-node items largest first (packing.py), then compositions on their
slices: it never fails; the verifier checks anyway, and a brute-force test over every placement
checks the optimum.

Smaller, still exact (joint_options.py): a larger shape of one pool or multi-node definition is
kept only if worth more than the smaller ones; a composition only if worth more than every
composition it contains; a multi-node definition only at the tiers where its eligible nodes
grow. Freeze levels fold in as formulations/freezing.py proves for goodput.py
(`fold_freeze_levels`: each option at its best admissible level, the same model size). Not
modelled: links shared by several jobs (a spread's bandwidth is its own); a spread over racks
is priced at the smallest rack uplink of the cluster.
"""


from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from schedlab.errors import DecodeError
from schedlab.formulations.freezing import fold_freeze_levels, has_freezing
from schedlab.formulations.goodput import max_min_upper, max_min_weight, min_job_speedup, objective_value
from schedlab.formulations.joint_options import COMP, MULTI, SINGLE, STAY, JointOptions, Pool, enumerate_joint_options
from schedlab.formulations.options import job_allocations
from schedlab.formulations.packing import NodeState
from schedlab.milp import MilpArrays, OneModel, Rows, stack_rows
from schedlab.state import GpuRef, JobAllocation, RoundInput

if TYPE_CHECKING:
    import pyomo.environ as pyo

__all__ = ["JointModel", "Structure", "build_arrays", "build_pyomo", "decode", "greedy_point", "joint_model",
           "option_label", "start_point", "structure"]


@dataclass(frozen=True)
class Structure:
    """The module docstring's index sets, as the arrays, decode and the greedy index them.

    Indices are positions: options c, jobs j, cluster node indices k, pools p, slices s. The
    Pyomo twin finds its own sets from the options (`_names`), so that the two builds check
    each other.
    """

    single_stayer: dict[int, tuple[int, int]]  # homogeneous node k in K1 -> (stay option, h_kc)
    multi_stayer: dict[int, list[tuple[int, int]]]  # homogeneous node k in K2 -> [(c, h_kc)]
    slice_stayers: dict[tuple[int, int], list[tuple[int, int]]]  # (heterogeneous pool, slice) -> [(c, h)]
    v_cols: tuple[tuple[int, int], ...]  # (job, pool) of every v, in column order
    w_cols: tuple[tuple[int, int], ...]  # (node, level) of every w, in column order


def structure(opts: JointOptions) -> Structure:
    """The module docstring's index sets of the options: stayers by node (K1, K2) and by slice, v and w columns.

    A homogeneous node held by one stay option is in K1, by several in K2 (which gets w_kd
    slots for every level d); a heterogeneous node's stayers are counted per slice (h_kcs).
    v has a column per (job, pool) pair with the pool in E_c of one of the job's multi options.
    """
    cl = opts.cluster
    holders: dict[int, list[tuple[int, int]]] = {}
    slice_stayers: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for j, held in opts.stay_gpus.items():
        c = opts.stay_option(j)
        for k, gpus in held.items():
            pool = cl.pools[cl.pool_of[k]]
            if pool.homogeneous:
                holders.setdefault(k, []).append((c, len(gpus)))
            else:
                for s, members in enumerate(pool.slices):
                    h = len(set(gpus) & set(members))
                    if h:
                        slice_stayers.setdefault((cl.pool_of[k], s), []).append((c, h))
    multi = np.flatnonzero(opts.kind == MULTI)
    pairs = {(int(j), p) for j, d in set(zip(opts.job[multi].tolist(), opts.pool[multi].tolist()))
             for p in opts.multi[d].pools}
    multi_stayer = {k: hs for k, hs in holders.items() if len(hs) > 1}
    w_cols = tuple((k, d) for k in sorted(multi_stayer) for d in cl.pools[cl.pool_of[k]].levels)
    return Structure({k: hs[0] for k, hs in holders.items() if len(hs) == 1}, multi_stayer, slice_stayers,
                     tuple(sorted(pairs)), w_cols)


def _constraints(opts: JointOptions, st: Structure) -> dict[str, Rows]:
    """Every constraint of the module docstring but (minspd) as the arrays' rows, by tag.

    The Pyomo twin writes them apart from the same algebra (build_pyomo), so that the two check
    each other.
    """
    cl, n, inf = opts.cluster, opts.num_options, math.inf
    num_v = len(st.v_cols)
    v_job = np.array([j for j, _ in st.v_cols], dtype=int)
    v_pool = np.array([p for _, p in st.v_cols], dtype=int)
    w_index = {kd: n + num_v + i for i, kd in enumerate(st.w_cols)}
    out = {tag: Rows() for tag in ("one", "level", "slots", "slice", "pool", "elig")}
    jobs_with = np.unique(opts.job)
    out["one"].extend([(int(j),) for j in jobs_with], np.searchsorted(jobs_with, opts.job), np.arange(n),
                      np.ones(n), -inf, 1.0)
    for p, pool in enumerate(cl.pools):
        G = pool.gpus_per_node
        v_here = n + np.flatnonzero(v_pool == p)
        if pool.homogeneous:
            k2 = [k for k in pool.nodes if k in st.multi_stayer]
            k1 = [st.single_stayer[k] for k in pool.nodes if k in st.single_stayer]
            singles = np.flatnonzero((opts.kind == SINGLE) & (opts.pool == p))
            for d in pool.levels:
                big = singles[opts.num_gpus[singles] >= d]
                cols = np.concatenate([big, v_here, [c for c, _ in k1], [w_index[k, d] for k in k2]])
                vals = np.concatenate([opts.num_gpus[big] / d, np.full(len(v_here), G / d),
                                       [math.ceil(h / d) for _, h in k1], -np.ones(len(k2))])
                out["level"].add((p, d), cols, vals, -inf, (len(pool.nodes) - len(k2)) * G / d)
            for k in k2:
                for d in pool.levels:
                    holders = st.multi_stayer[k]
                    out["slots"].add((k, d), [w_index[k, d]] + [c for c, _ in holders],
                                     [float(d)] + [float(h) for _, h in holders], -inf, float(G))
            continue
        comps = np.flatnonzero((opts.kind == COMP) & (opts.pool == p))
        counts = np.array(opts.compositions[p]).reshape(-1, len(pool.slices))[opts.comp_id[comps]]
        for s, members in enumerate(pool.slices):
            used = counts[:, s] > 0
            stayers = st.slice_stayers.get((p, s), [])
            cols = np.concatenate([comps[used], [c for c, _ in stayers], v_here])
            vals = np.concatenate([counts[used, s], [h for _, h in stayers], np.full(len(v_here), len(members))])
            out["slice"].add((p, s), cols, vals, -inf, float(len(members)))
    multi = np.flatnonzero(opts.kind == MULTI)
    jobs_v = np.unique(v_job)
    pool_row = np.searchsorted(jobs_v, v_job)  # (pool) row of each v
    out["pool"].extend([(int(j),) for j in jobs_v], np.concatenate([pool_row, np.searchsorted(jobs_v, opts.job[multi])]),
                       np.concatenate([n + np.arange(num_v), multi]),
                       np.concatenate([np.ones(num_v), -opts.num_nodes[multi]]), 0.0, 0.0)
    v_of = np.full((opts.num_jobs, len(cl.pools)), -1)  # (elig) row = v column index
    v_of[v_job, v_pool] = np.arange(num_v)
    member = np.array([[p in opts.multi[d].pools for p in range(len(cl.pools))] for d in range(len(opts.multi))],
                      dtype=bool).reshape(len(opts.multi), len(cl.pools))
    c_idx, p_idx = np.nonzero(member[opts.pool[multi]])
    size = np.array([len(pool.nodes) for pool in cl.pools], dtype=float)
    out["elig"].extend([(int(j), int(p)) for j, p in st.v_cols],
                       np.concatenate([np.arange(num_v), v_of[opts.job[multi[c_idx]], p_idx]]),
                       np.concatenate([n + np.arange(num_v), multi[c_idx]]),
                       np.concatenate([np.ones(num_v), -size[p_idx]]), -inf, 0.0)
    return out


def _columns(opts: JointOptions, st: Structure) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Objective coefficients, upper bounds and integrality of x, v, w, then t (max-min)."""
    cl, n = opts.cluster, opts.num_options
    max_min = opts.round_input.settings.max_min
    c = np.concatenate([opts.utility - opts.U0[opts.job], np.zeros(len(st.v_cols) + len(st.w_cols))])
    hi = np.concatenate([np.ones(n), [float(len(cl.pools[p].nodes)) for _, p in st.v_cols],
                         [cl.pools[cl.pool_of[k]].gpus_per_node // d for k, d in st.w_cols]])
    integer = np.ones(len(c), dtype=bool)
    if max_min:
        c = np.append(c, max_min_weight(opts))
        hi = np.append(hi, max_min_upper(opts))
        integer = np.append(integer, False)
    return c, hi, integer


def start_point(opts: JointOptions, st: Structure) -> np.ndarray:
    """The warm start: every running job stays.

    x_c = 1 for the stay options; v = 0; each w_kd the free d-slots its node's stayers leave,
    floor((G_g - sum h_kc) / d); t (max-min) the smallest penalized speedup of that point.
    """
    n = opts.num_options
    v = np.zeros(n + len(st.v_cols) + len(st.w_cols) + opts.round_input.settings.max_min)
    for j in opts.stay_gpus:
        v[opts.stay_option(j)] = 1.0
    for i, (k, d) in enumerate(st.w_cols):
        G = opts.cluster.pools[opts.cluster.pool_of[k]].gpus_per_node
        v[n + len(st.v_cols) + i] = (G - sum(h for _, h in st.multi_stayer[k])) // d
    if opts.round_input.settings.max_min:
        v[-1] = min_job_speedup(opts, v[:n])
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

    Columns: x, then v (Structure.v_cols), then w (Structure.w_cols), then t (max-min). The
    objective's constant is sum_j U0_j; rows are (one), (level), (slots), (slice), (pool),
    (elig), then (minspd) under max-min. The warm start is `start_point`'s, and each column's
    job (x and v; -1 for w and t) is given as `choice`.
    """
    c, col_hi, integer = _columns(opts, st)
    blocks = _constraints(opts, st)
    if opts.round_input.settings.max_min:
        blocks["minspd"] = _minspd(opts, len(c) - 1)
    A, lo, hi = stack_rows(list(blocks.values()), len(c))
    return MilpArrays(c=c, offset=float(opts.U0.sum()), A=A, row_lo=lo, row_hi=hi,
                      col_lo=np.zeros(len(c)), col_hi=col_hi, integer=integer, start=start_point(opts, st),
                      choice=_column_jobs(opts, st, len(c)))


def _column_jobs(opts: JointOptions, st: Structure, num_cols: int) -> np.ndarray:
    """The job of every column: x and v belong to their job; w and t to none (-1)."""
    jobs = np.full(num_cols, -1)
    jobs[: opts.num_options] = opts.job
    jobs[opts.num_options: opts.num_options + len(st.v_cols)] = [j for j, _ in st.v_cols]
    return jobs


@dataclass(frozen=True)
class _Names:
    """The module docstring's sets over names, found from the options alone.

    Not from Structure or the arrays' rows: options are (job id, option) labels, pools "p0",
    "p1", ... (as in the labels), nodes their ids.
    """

    options: list[tuple[str, str]]  # C, in the arrays' column order
    options_of: dict[str, list[tuple[str, str]]]  # C_j, every job (empty: no option)
    pools: dict[str, Pool]  # W = H u X
    members: dict[str, list[str]]  # K_w
    singles: dict[str, list[tuple[str, str]]]  # g in H -> its single options
    comps: dict[str, list[tuple[tuple[str, str], tuple[int, ...]]]]  # k in X -> (c, m_c) of its compositions
    multis: dict[str, list[tuple[str, str]]]  # j -> its multi options
    eligible: dict[tuple[str, str], list[tuple[str, str]]]  # (j, w) in V -> multi options c of j with w in E_c
    held: dict[str, dict[tuple[str, str], int]]  # homogeneous node k -> S_k as {stay option: h_kc}
    held_slice: dict[tuple[str, int], dict[tuple[str, str], int]]  # (k in X, s) -> {stay option: h_kcs > 0}
    pool_of: dict[str, str]  # node -> its pool
    V: list[tuple[str, str]]  # (j, w) with w in E_c of a multi option c of j, in the arrays' column order
    takers: dict[str, list[str]]  # w -> every j with (j, w) in V
    took: dict[str, list[str]]  # j -> every w with (j, w) in V
    K2L: list[tuple[str, int]]  # (k, d): k in K2_g, d in L_g, in the arrays' column order


def _names(opts: JointOptions) -> _Names:
    """The docstring's sets over names (`_Names`), from the options and the cluster's pools."""
    cl, jobs, nodes = opts.cluster, opts.round_input.jobs, opts.round_input.cluster.nodes
    labels = [option_label(opts, c) for c in range(opts.num_options)]
    pools = {f"p{p}": pool for p, pool in enumerate(cl.pools)}
    node_id = [node.id for node in nodes]
    options_of: dict[str, list[tuple[str, str]]] = {job.id: [] for job in jobs}
    for label in labels:
        options_of[label[0]].append(label)
    singles: dict[str, list[tuple[str, str]]] = {g: [] for g, pool in pools.items() if pool.homogeneous}
    for c in np.flatnonzero(opts.kind == SINGLE).tolist():
        singles[f"p{opts.pool[c]}"].append(labels[c])
    comps: dict[str, list[tuple[tuple[str, str], tuple[int, ...]]]] = {
        node_id[pool.nodes[0]]: [] for pool in pools.values() if not pool.homogeneous}
    for c in np.flatnonzero(opts.kind == COMP).tolist():
        comps[node_id[cl.pools[opts.pool[c]].nodes[0]]].append((labels[c], opts.comp(c)))
    multis: dict[str, list[tuple[str, str]]] = {job.id: [] for job in jobs}
    eligible: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for c in np.flatnonzero(opts.kind == MULTI).tolist():
        multis[labels[c][0]].append(labels[c])
        for p in opts.multi[opts.pool[c]].pools:  # E_c
            eligible.setdefault((labels[c][0], f"p{p}"), []).append(labels[c])
    held: dict[str, dict[tuple[str, str], int]] = {}
    held_slice: dict[tuple[str, int], dict[tuple[str, str], int]] = {}
    for j, on in opts.stay_gpus.items():
        stay = labels[opts.stay_option(j)]
        for k, gpus in on.items():
            pool = cl.pools[cl.pool_of[k]]
            if pool.homogeneous:
                held.setdefault(node_id[k], {})[stay] = len(gpus)
                continue
            for s, members in enumerate(pool.slices):
                if set(gpus) & set(members):
                    held_slice.setdefault((node_id[k], s), {})[stay] = len(set(gpus) & set(members))
    pool_index = {g: p for p, g in enumerate(pools)}
    job_index = {job.id: j for j, job in enumerate(jobs)}
    V = sorted(eligible, key=lambda jw: (job_index[jw[0]], pool_index[jw[1]]))
    takers: dict[str, list[str]] = {w: [] for w in pools}
    took: dict[str, list[str]] = {job.id: [] for job in jobs}
    for job_id, w in V:
        takers[w].append(job_id)
        took[job_id].append(w)
    K2L = [(node_id[k], d) for k, node in enumerate(nodes) if len(held.get(node.id, {})) > 1
           for d in cl.pools[cl.pool_of[k]].levels]
    return _Names(labels, options_of, pools, {g: [node_id[k] for k in pool.nodes] for g, pool in pools.items()},
                  singles, comps, multis, eligible, held, held_slice, {node_id[k]: f"p{p}" for k, p in cl.pool_of.items()},
                  V, takers, took, K2L)


def build_pyomo(opts: JointOptions) -> pyo.ConcreteModel:
    """The same model in Pyomo, written constraint by constraint from the module docstring.

    It is written over the sets of `_names` (not from the arrays' rows, so that the two builds
    check each other) and indexed by names: x[job id, option] (option_label), v[job id, pool],
    w[node id, d]; (one), (pool) and (minspd) by job id, (elig) as v, (level) by (pool, d),
    (slots) as w, (slice) by (node id, slice). The parameters a customization reads are
    goodput's, over the same (job id, option) pairs C: gpus[c] (a_c), nodes[c] (n_c),
    speedup[c] (s'_c), utility[c] (u_c); and U0[j] over J. `model.columns` lists x, v, w and t
    in the arrays' column order.
    """
    import pyomo.environ as pyo  # here, not at the top: rounds solved from arrays never load Pyomo

    nm = _names(opts)
    labels = nm.options
    m = pyo.ConcreteModel(name="joint")
    m.J = pyo.Set(initialize=list(nm.options_of), ordered=True)
    m.C = pyo.Set(dimen=2, initialize=labels, ordered=True)
    m.V = pyo.Set(dimen=2, initialize=nm.V, ordered=True)
    m.HL = pyo.Set(dimen=2, initialize=[(g, d) for g, pool in nm.pools.items() if pool.homogeneous for d in pool.levels],
                   ordered=True)
    m.K2L = pyo.Set(dimen=2, initialize=nm.K2L, ordered=True)
    m.XS = pyo.Set(dimen=2, initialize=[(pool_nodes[0], s) for g, pool_nodes in nm.members.items()
                                        if not nm.pools[g].homogeneous for s in range(len(nm.pools[g].slices))],
                   ordered=True)
    m.gpus = pyo.Param(m.C, initialize=dict(zip(labels, opts.num_gpus.tolist())))
    m.nodes = pyo.Param(m.C, initialize=dict(zip(labels, opts.num_nodes.tolist())))
    m.speedup = pyo.Param(m.C, initialize=dict(zip(labels, opts.penalized_speedup.tolist())))
    m.utility = pyo.Param(m.C, initialize=dict(zip(labels, opts.utility.tolist())))
    m.U0 = pyo.Param(m.J, initialize=dict(zip(nm.options_of, opts.U0.tolist())))
    m.x = pyo.Var(m.C, domain=pyo.Binary)
    m.v = pyo.Var(m.V, domain=pyo.NonNegativeIntegers)
    m.w = pyo.Var(m.K2L, domain=pyo.NonNegativeIntegers)
    skip = pyo.Constraint.Skip  # a row with no variable bounds nothing (and Pyomo refuses it)

    def one(m, j):
        return sum(m.x[c] for c in nm.options_of[j]) <= 1 if nm.options_of[j] else skip

    def level(m, g, d):
        K1 = [k for k in nm.members[g] if len(nm.held.get(k, {})) == 1]
        K2 = [k for k in nm.members[g] if len(nm.held.get(k, {})) > 1]
        G = nm.pools[g].gpus_per_node
        terms = ([m.gpus[c] / d * m.x[c] for c in nm.singles[g] if m.gpus[c] >= d]
                 + [G / d * m.v[j, g] for j in nm.takers[g]]
                 + [math.ceil(h / d) * m.x[c] for k in K1 for c, h in nm.held[k].items()]
                 + [-m.w[k, d] for k in K2])
        return sum(terms) <= (len(nm.members[g]) - len(K2)) * G / d if terms else skip

    def slots(m, k, d):
        return d * m.w[k, d] + sum(h * m.x[c] for c, h in nm.held[k].items()) <= nm.pools[nm.pool_of[k]].gpus_per_node

    def on_slice(m, k, s):
        n_ks = len(nm.pools[nm.pool_of[k]].slices[s])
        terms = ([mc[s] * m.x[c] for c, mc in nm.comps[k] if mc[s]]
                 + [h * m.x[c] for c, h in nm.held_slice.get((k, s), {}).items()]
                 + [n_ks * m.v[j, nm.pool_of[k]] for j in nm.takers[nm.pool_of[k]]])
        return sum(terms) <= n_ks if terms else skip

    def whole_nodes(m, j):
        if not nm.multis[j]:
            return skip
        return sum(m.v[j, w] for w in nm.took[j]) == sum(m.nodes[c] * m.x[c] for c in nm.multis[j])

    def elig(m, j, w):
        return m.v[j, w] <= len(nm.members[w]) * sum(m.x[c] for c in nm.eligible[j, w])

    m.one = pyo.Constraint(m.J, rule=one)
    m.level = pyo.Constraint(m.HL, rule=level)
    m.slots = pyo.Constraint(m.K2L, rule=slots)
    m.slice = pyo.Constraint(m.XS, rule=on_slice)
    m.pool = pyo.Constraint(m.J, rule=whole_nodes)
    m.elig = pyo.Constraint(m.V, rule=elig)
    p_mean = sum(m.U0[j] for j in m.J) + sum((m.utility[c] - m.U0[c[0]]) * m.x[c] for c in m.C)
    m.columns = [m.x[c] for c in m.C] + [m.v[jw] for jw in m.V] + [m.w[kd] for kd in m.K2L]
    if opts.round_input.settings.max_min:
        m.t = pyo.Var(domain=pyo.NonNegativeReals, bounds=(0, max_min_upper(opts)))
        m.minspd = pyo.Constraint(m.J, rule=lambda m, j: m.t <= sum(m.speedup[c] * m.x[c] for c in nm.options_of[j]))
        m.obj = pyo.Objective(expr=max_min_weight(opts) * m.t + p_mean, sense=pyo.maximize)
        m.columns.append(m.t)
    else:
        m.obj = pyo.Objective(expr=p_mean, sense=pyo.maximize)
    return m


def option_label(opts: JointOptions, c: int) -> tuple[str, str]:
    """The name of option c in the Pyomo model: (job id, option).

    The option is "stay", or its kind and shape: "single:p3:2" is 2 GPUs on one node of pool 3,
    "multi1:n2" 2 whole nodes of multi-node definition 1, "comp:p0:1x2" a composition of 1 and
    2 GPUs of the slices of heterogeneous pool 0.
    """
    job = opts.round_input.jobs[opts.job[c]].id
    kind = int(opts.kind[c])
    if kind == STAY:
        return job, "stay"
    if kind == MULTI:
        return job, f"multi{int(opts.pool[c])}:n{int(opts.num_nodes[c])}"
    name = "single" if kind == SINGLE else "comp"
    shape = "x".join(map(str, opts.comp(c))) if kind == COMP else str(int(opts.num_gpus[c]))
    return job, f"{name}:p{int(opts.pool[c])}:{shape}"


def decode(opts: JointOptions, st: Structure, values: np.ndarray) -> tuple[JobAllocation, ...]:
    """Concrete GPUs and batches of every job from a point of the model (array layout).

    The chosen options (x_c > 0.5) are placed as the module docstring argues they always fit:
    stayers on their GPUs, then multi options on the v whole nodes of each pool, then
    single-node items largest first on the tightest node of their pool (packing.NodeState),
    then compositions on their slices.

    Raises
    ------
    DecodeError
        When a chosen option does not fit (a point that breaks a row).
    """
    jobs, cl, nodes = opts.round_input.jobs, opts.cluster, opts.round_input.cluster.nodes
    n = opts.num_options
    chosen = np.asarray(values[:n]) > 0.5
    state = NodeState(opts.round_input.cluster)
    picked = np.flatnonzero(chosen)
    gpus_of: dict[int, tuple[GpuRef, ...]] = {}
    for c in picked[opts.kind[picked] == STAY]:
        job = jobs[opts.job[c]]
        if not state.take_exact(job.current_gpus):
            raise DecodeError(f"job {job.id!r} cannot stay: its GPUs are taken")
        gpus_of[c] = job.current_gpus
    whole = {jw: int(round(values[n + i])) for i, jw in enumerate(st.v_cols)}
    for c in picked[opts.kind[picked] == MULTI]:
        j, refs = int(opts.job[c]), list[GpuRef]()
        for p in opts.multi[opts.pool[c]].pools:
            count = whole.get((j, p), 0)
            pool = cl.pools[p]
            taken = state.take_shape(pool.nodes, count, pool.gpus_per_node) if count else ()
            if taken is None:
                raise DecodeError(f"no {count} free whole nodes in pool {p} for job {jobs[j].id!r}")
            refs += taken
        if len(refs) != opts.num_gpus[c]:
            raise DecodeError(f"job {jobs[j].id!r} got {len(refs)} GPUs of whole nodes, not {opts.num_gpus[c]}")
        gpus_of[c] = tuple(refs)
    singles = picked[opts.kind[picked] == SINGLE]
    for c in sorted(singles, key=lambda c: (-opts.num_gpus[c], c)):
        single = state.take_shape(cl.pools[opts.pool[c]].nodes, 1, int(opts.num_gpus[c]))
        if single is None:
            raise DecodeError(f"no room for job {jobs[opts.job[c]].id!r} ({opts.num_gpus[c]} GPUs)")
        gpus_of[c] = single
    for c in picked[opts.kind[picked] == COMP]:
        pool = cl.pools[opts.pool[c]]
        k = pool.nodes[0]
        indices: list[int] = []
        for members, count in zip(pool.slices, opts.comp(c)):
            free = [i for i in state.free[k] if i in members][:count]
            if len(free) < count:
                raise DecodeError(f"no room on node {nodes[k].id!r} for job {jobs[opts.job[c]].id!r}")
            indices += free
        state.set_free(k, [i for i in state.free[k] if i not in indices])
        gpus_of[c] = tuple(GpuRef(nodes[k].id, i) for i in indices)
    return job_allocations(opts, picked, gpus_of)


def greedy_point(opts: JointOptions, st: Structure) -> np.ndarray:
    """A feasible point found greedily: the fallback when a solver has none.

    Running jobs whose GPUs are still free stay; then options are taken by the utility they add
    over U0, best first: a job not yet placed takes the option if it adds value and fits (a
    single option on the tightest node, a multi option on empty whole nodes of its eligible
    pools in pool order, a composition on its slices). w and t are left 0.
    """
    cl, n = opts.cluster, opts.num_options
    point = np.zeros(n + len(st.v_cols) + len(st.w_cols) + opts.round_input.settings.max_min)
    v_index = {jw: n + i for i, jw in enumerate(st.v_cols)}
    free = {k: set(range(node.gpus)) for k, node in enumerate(opts.round_input.cluster.nodes)}
    placed = set()
    for j, held in opts.stay_gpus.items():
        if all(set(g) <= free[k] for k, g in held.items()):
            for k, g in held.items():
                free[k] -= set(g)
            point[opts.stay_option(j)] = 1.0
            placed.add(j)
    gain = opts.utility - opts.U0[opts.job]
    for c in np.argsort(-gain, kind="stable"):
        j = int(opts.job[c])
        if j in placed or gain[c] <= 0 or opts.kind[c] == STAY:
            continue
        take = _fits(opts, c, free)
        if take is None:
            continue
        for k, gpus in take.items():
            free[k] -= gpus
            if opts.kind[c] == MULTI:
                point[v_index[j, cl.pool_of[k]]] += 1
        point[c] = 1.0
        placed.add(j)
    return point


def _fits(opts: JointOptions, c: int, free: dict[int, set[int]]) -> dict[int, set[int]] | None:
    """GPUs option c would take from `free` (node -> GPU indices), or None if it does not fit."""
    cl = opts.cluster
    if opts.kind[c] == MULTI:
        empty = [k for p in opts.multi[opts.pool[c]].pools for k in cl.pools[p].nodes
                 if len(free[k]) == cl.pools[p].gpus_per_node]
        need = int(opts.num_nodes[c])
        return {k: set(free[k]) for k in empty[:need]} if len(empty) >= need else None
    pool = cl.pools[opts.pool[c]]
    if opts.kind[c] == SINGLE:
        fits = sorted((len(free[k]), k) for k in pool.nodes if len(free[k]) >= opts.num_gpus[c])
        return {fits[0][1]: set(sorted(free[fits[0][1]])[: opts.num_gpus[c]])} if fits else None
    k = pool.nodes[0]
    take = set()
    for members, count in zip(pool.slices, opts.comp(c)):
        avail = sorted(free[k] & set(members))
        if len(avail) < count:
            return None
        take |= set(avail[:count])
    return {k: take}


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
        """A feasible point found greedily (`greedy_point`): the answer when a solver has none."""
        return greedy_point(self.opts, self.st)


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
