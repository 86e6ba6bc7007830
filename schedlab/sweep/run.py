"""Running a sweep's cells: locally in processes or on Dask, each result stored at once.

Every finished cell is written to OUT/cells/<key>.json (atomically: a temporary file, then a
rename), so a sweep killed at any moment resumes from what is on disk and no cell is stored
twice. A cell that raised is written to OUT/cells/<key>.error.json with its traceback; the
sweep goes on, and the next run retries it. The driver writes the files, never the workers,
so a Dask cluster needs no shared file system. A sweep runs into a folder that is new, empty or
its own config's (claim_sweep_folder): another config's only when forced, never another kind's.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from schedlab import __version__
from schedlab.errors import ConfigError
from schedlab.io.outputs import OUTPUT_KINDS, claim_folder
from schedlab.policies import Policy, make_policy
from schedlab.serve_auth import is_loopback
from schedlab.sim.engine import one_blas_thread, replay
from schedlab.sim.jobs import TraceJob
from schedlab.sim.world import WORLDS, ReplayConfig
from schedlab.state import FreezePenalty
from schedlab.sweep.config import (
    CLUSTER_AXIS,
    MODELS,
    POLICY_AXES,
    WORLD_AXES,
    Sweep,
    cell_key,
    cell_pools,
    parse_sweep,
    trace_label,
)
from schedlab.trace_specs import trace_spec

__all__ = ["ENGINES", "CellStore", "Remote", "build_jobs", "cell_config", "deterministic", "execute", "make_cell_policy",
           "records_frame", "results_frame", "results_frames", "run_sweep", "run_sweeps"]

ENGINES = ("local", "dask")
TIMING_KEYS = ("solve_p50_ms", "solve_p95_ms", "solve_max_ms")  # vary run to run; all else is exact


def cell_config(cell: dict[str, Any]) -> ReplayConfig:
    """The cell's world: its world's ReplayConfig with the cell's axes (sweep.config.WORLD_AXES)."""
    pools = {"pools": cell_pools(cell)} if CLUSTER_AXIS in cell else {}
    return WORLDS[cell["world"]].with_options(
        **{field: cell[axis] for axis, field in WORLD_AXES.items() if axis in cell}, **pools,
        throughput_model=MODELS[cell["model"]],
        freeze_opt_in=cell["opt_in"], freeze_budget=cell["budget"], freeze_seed=cell["seed"],
        freeze_penalty=FreezePenalty(scale=FreezePenalty().scale * cell["penalty_scale"]), seed=cell["seed"])


def build_jobs(cell: dict[str, Any], config: ReplayConfig) -> tuple[TraceJob, ...]:
    """The cell's trace as jobs (trace_specs), sampled with the cell's seed, its first max_jobs,
    scaled by load, read as the world reads it; the world's horizon stays as it is."""
    rng = np.random.default_rng(cell["seed"])
    return trace_spec(cell["trace"]).replay_jobs(config, rng, cell["max_jobs"], cell["load"])


def make_cell_policy(cell: dict[str, Any]) -> Policy:
    """The cell's policy; the cell's seed and policy axes (order, backfill) go to every policy
    with such a field, unless its params set one."""
    spec = cell["policy"]
    params = dict(spec["params"])
    policy = make_policy(spec["name"])
    fields: set[str] = {f.name for f in dataclasses.fields(policy)} if dataclasses.is_dataclass(policy) else set()
    for key, value in {"seed": cell["seed"], **{a: cell[a] for a in POLICY_AXES if a in cell}}.items():
        if key in fields:
            params.setdefault(key, value)
    return make_policy(spec["name"], params)


def execute(cell: dict[str, Any], key: str | None = None) -> dict[str, Any]:
    """Replay one cell; never raises: a failure comes back as a record with its traceback.

    `key` is the cell's key as the sweep's driver made it (default: this process's). A worker
    whose schedlab source differs from the driver's (edited while the sweep ran) would store its
    result under another key, one the sweep never reads: it records a failure instead."""
    own = cell_key(cell)
    key = key or own
    if own != key:
        return {"key": key, "version": __version__, "cell": cell,
                "error": "schedlab's source changed while the sweep ran (this worker's differs from the sweep's, "
                         "source_hash): run the sweep again once the code is settled"}
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        # One BLAS thread: with every core busy running cells, OpenBLAS's spinning workers
        # made the small interpolations of trace sampling up to 500x slower.
        with one_blas_thread():
            config = cell_config(cell)
            result = replay(build_jobs(cell, config), make_cell_policy(cell), config)
    except Exception:  # noqa: BLE001 - a failed cell is recorded, the sweep goes on
        return {"key": key, "version": __version__, "cell": cell, "error": traceback.format_exc()}
    rounds = result.rounds
    return {"key": key, "version": __version__, "cell": cell, "summary": result.summary,
            "jct_s": result.jobs.jct_s.round(6).tolist(),
            "rounds": {"time_s": rounds.time_s.tolist(), "gpus_used": rounds.gpus_used.astype(int).tolist(),
                       "solve_ms": rounds.solve_ms.dropna().round(3).tolist()},
            "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0}


def _read_record(path: Path) -> dict[str, Any] | None:
    """The finished cell stored at path, or None if the file is not one (cut short by a killed
    run, emptied, or another cell's)."""
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    whole = isinstance(record, dict) and record.get("key") == path.stem and isinstance(record.get("summary"), dict)
    return record if whole else None


class CellStore:
    """OUT/cells/<key>.json per finished cell, <key>.error.json per failed one. Reading creates
    nothing (the folder appears with its first cell), so that looking into a folder a sweep
    is about to claim leaves it empty."""

    def __init__(self, out: str | Path):
        self.dir = Path(out) / "cells"

    def done(self) -> set[str]:
        """Keys of the finished cells whose files are whole (a truncated, empty or foreign file is
        not done: the next sweep runs that cell again)."""
        return set(self._finished())

    def write(self, record: dict[str, Any]) -> None:
        """Store a cell's record, atomically (a temporary file, then a rename).

        A failed cell's goes to <key>.error.json; a finished cell's to <key>.json, and removes
        the error file of an earlier failed run.
        """
        name = f"{record['key']}.error.json" if "error" in record else f"{record['key']}.json"
        self.dir.mkdir(exist_ok=True)
        tmp = self.dir / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, self.dir / name)
        if "error" not in record:
            (self.dir / f"{record['key']}.error.json").unlink(missing_ok=True)

    def records(self, keys: set[str] | None = None) -> list[dict[str, Any]]:
        """The whole records of the finished cells, sorted by key; only those of `keys` when given."""
        return [r for key, r in sorted(self._finished().items()) if keys is None or key in keys]

    def corrupt(self) -> list[Path]:
        """Cell files that do not hold a whole record of their own key."""
        return [p for p in self._cell_files() if _read_record(p) is None]

    def _cell_files(self) -> list[Path]:
        return sorted(p for p in self.dir.glob("*.json") if not p.name.endswith(".error.json"))

    def _finished(self) -> dict[str, dict[str, Any]]:
        found = ((p.stem, _read_record(p)) for p in self._cell_files())
        return {key: record for key, record in found if record is not None}

    def errors(self) -> list[dict[str, Any]]:
        """The records of the failed cells, each with its traceback."""
        return [json.loads(p.read_text()) for p in sorted(self.dir.glob("*.error.json"))]


@dataclasses.dataclass(frozen=True)
class Remote:
    """A Dask scheduler to run cells on. Its workers unpickle and run what the scheduler sends,
    and over plain tcp:// anyone who can answer at the address can send it: so a remote
    scheduler needs TLS (tls:// with these files, as Dask's Security takes them, or Dask's own
    distributed.comm.tls config), or `insecure` said out loud. Loopback addresses (serve_auth's
    rule) are trusted."""

    address: str
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    insecure: bool = False

    def security(self):
        """Dask's Security for the TLS files (None without a CA file: Dask's own config)."""
        from dask.distributed import Security

        if self.tls_ca_file is None:
            return None
        return Security(tls_ca_file=self.tls_ca_file, tls_client_cert=self.tls_cert, tls_client_key=self.tls_key,
                        require_encryption=True)

    def check(self) -> None:
        """Refuse an unencrypted remote scheduler unless `insecure` is set, and TLS settings that cannot connect.

        Raises
        ------
        ConfigError
            For an address that is not loopback, over any scheme but tls://, without `insecure`;
            tls:// without the CA and this client's certificate (the files, or Dask's config);
            TLS files for an address that is not tls://.
        """
        scheme, _, rest = self.address.partition("://")
        host = rest.rsplit(":", 1)[0]
        files = self.tls_ca_file or self.tls_cert or self.tls_key
        if scheme == "tls":
            if (self.tls_ca_file and self.tls_cert) if files else _dask_tls_configured():
                return
            raise ConfigError(f"--address {self.address}: tls:// needs the CA that signed the scheduler and this "
                              "client's certificate: --tls-ca-file and --tls-cert (and --tls-key unless the "
                              "certificate file holds the key), or Dask's distributed.comm.tls config")
        if files:
            raise ConfigError(f"--address {self.address}: --tls-ca-file, --tls-cert and --tls-key are for a "
                              "tls:// address; use tls://HOST:PORT")
        if self.insecure or is_loopback(host):
            return
        raise ConfigError(f"--address {self.address}: a remote scheduler over {scheme or 'tcp'}:// runs pickled "
                          "tasks from whoever answers there; use tls://HOST:PORT with --tls-ca-file, --tls-cert "
                          "and --tls-key (or Dask's TLS config), or --insecure on a network you trust")


def _dask_tls_configured() -> bool:
    """Whether Dask's own config (distributed.comm.tls) names a CA and a client certificate."""
    try:
        import dask
    except ImportError:  # the dask engine says what to install
        return False
    return bool(dask.config.get("distributed.comm.tls.ca-file", None)
                and dask.config.get("distributed.comm.tls.client.cert", None))


def run_sweep(sweep: Sweep, out: str | Path, engine: str = "local", workers: int | None = None,
              address: str | Remote | None = None, progress: bool = True,
              force: bool = False) -> tuple[list[dict], list[dict]]:
    """Run the cells not yet stored under `out`; return (records, errors) of this sweep's cells.

    `out` is new, empty or this config's folder (claim_sweep_folder); with `force`, another
    config's folder too.
    """
    return run_sweeps([(sweep, out)], engine, workers, address, progress, force)[0]


def run_sweeps(runs: Sequence[tuple[Sweep, str | Path]], engine: str = "local", workers: int | None = None,
               address: str | Remote | None = None, progress: bool = True,
               force: bool = False) -> list[tuple[list[dict], list[dict]]]:
    """run_sweep for several (sweep, out) at once, their cells in one pool: a sweep's last, long
    cells run beside the next one's instead of leaving workers idle. A cell that several sweeps
    still need runs once and is stored in each of their folders. Returns each sweep's (records,
    errors), in order.
    """
    if engine not in ENGINES:
        raise ConfigError(f"engine {engine!r}: use one of {', '.join(ENGINES)}")
    remote = Remote(address) if isinstance(address, str) else address
    if remote is not None:
        remote.check()
    stores = [CellStore(claim_sweep_folder(sweep, out, force)) for sweep, out in runs]
    wanted = [{cell_key(c): c for c in sweep.cells} for sweep, _ in runs]
    todo: dict[str, dict] = {}  # in the configs' order, sweep after sweep
    homes: dict[str, list[int]] = {}  # the sweeps (by index) whose folders want the cell
    for i, (store, keys) in enumerate(zip(stores, wanted)):
        done = store.done()
        for key, cell in keys.items():
            if key not in done:
                todo.setdefault(key, cell)
                homes.setdefault(key, []).append(i)
    total = len(set().union(*wanted))
    workers = workers or os.cpu_count() or 1
    runner = _local if engine == "local" else _dask
    failed: list[list[dict]] = [[] for _ in runs]
    with _Progress(total, total - len(todo), min(workers, len(todo)), progress) as bar:
        for record in runner(list(todo.values()), workers, remote):
            for i in homes[record["key"]]:
                stores[i].write(record)
                if "error" in record:
                    failed[i].append(record)
            bar.finished("error" in record)
    return [(store.records(set(keys)), errors) for store, keys, errors in zip(stores, wanted, failed)]


def claim_sweep_folder(sweep: Sweep, out: str | Path, force: bool = False) -> Path:
    """The sweep's results folder, its config stored there as sweep.toml.

    A new or empty folder, or one holding this config's results (the same cells, baseline and
    metric: the sweep resumes there). A folder of another config is refused, naming both, unless
    `force`: then its sweep.toml is replaced, and the cells the two share are reused. A folder of
    another kind, or of other files, is refused always (io.outputs.claim_folder).
    """
    folder = claim_folder(out, OUTPUT_KINDS["sweep"])
    stored = folder / "sweep.toml"
    if stored.is_file() and not force:
        _check_same_config(sweep, stored)
    stored.write_text(sweep.text)
    return folder


def _check_same_config(sweep: Sweep, stored: Path) -> None:
    """Raise ConfigError, naming both configs, where the config `stored` is not `sweep`'s."""
    try:
        text = stored.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--out {stored.parent}: cannot read its {stored.name} ({exc}); give another --out, "
                          f"or --force to store {sweep.source} there") from None
    if text == sweep.text:
        return
    try:
        before = parse_sweep(text, str(stored))
    except ConfigError as exc:
        what = f"{stored}, which no longer reads as a sweep config ({exc}),"
    else:
        if before.same_results(sweep):
            return
        shared = len({cell_key(c) for c in before.cells} & {cell_key(c) for c in sweep.cells})
        what = f"{stored} (sweep {before.name!r}, {_cells(len(before.cells))}; {shared} shared with the new one)"
    raise ConfigError(f"--out {stored.parent}: holds another sweep config's results: {what} is not {sweep.source} "
                      f"(sweep {sweep.name!r}, {_cells(len(sweep.cells))}); give {sweep.source} another --out, or "
                      f"--force to run it there ({sweep.source} replaces {stored}; the cells they share are reused)")


def _cells(count: int) -> str:
    return f"{count} cell{'s' * (count != 1)}"


def _exit_with_driver(driver_pid: int, every_s: float = 0.5) -> None:
    """A pool worker ends when the sweep that started it is gone (killed: no cleanup runs there),
    instead of finishing its cell and idling for minutes."""
    def watch() -> None:
        while True:
            time.sleep(every_s)
            try:
                os.kill(driver_pid, 0)
            except ProcessLookupError:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-driver").start()


def _local(cells: list[dict], workers: int, remote: Remote | None) -> Iterator[dict]:
    if not cells:
        return
    # forkserver, not fork: a forked child inherits the parent's thread pools (OpenMP under
    # scikit-learn's k-means, solver threads) with their locks held, and hangs on its first use.
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=min(workers, len(cells)), mp_context=context,
                             initializer=_exit_with_driver, initargs=(os.getpid(),)) as pool:
        for future in as_completed([pool.submit(execute, c, cell_key(c)) for c in cells]):
            yield future.result()


def _dask(cells: list[dict], workers: int, remote: Remote | None) -> Iterator[dict]:
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_completed
    except ImportError as exc:
        raise ConfigError("engine dask needs Dask distributed: pip install 'schedlab[dask]'") from exc
    if not cells:
        return
    cluster = None if remote else LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                               dashboard_address=None, silence_logs=logging.ERROR)
    client = Client(remote.address, security=remote.security()) if remote else Client(cluster)
    try:
        keys = [cell_key(c) for c in cells]
        futures = client.map(execute, cells, keys, key=[f"cell-{k}" for k in keys], pure=False)
        for future in dask_completed(futures):
            yield _dask_record(future)
            future.release()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _dask_record(future) -> dict:
    if future.status == "error":  # the worker itself died: execute() records everything else
        cell_key_ = future.key.removeprefix("cell-")
        return {"key": cell_key_, "version": __version__, "cell": None, "error": repr(future.exception())}
    return future.result()


class _Progress:
    """tqdm bar: cells done, running, failed, and the ETA."""

    def __init__(self, total: int, done: int, running: int, enabled: bool):
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=done, unit="cell", disable=not enabled, desc="sweep")
        self.running, self.failed, self.left = running, 0, total - done
        self._post()

    def _post(self) -> None:
        self.bar.set_postfix_str(f"running {self.running}, failed {self.failed}")

    def finished(self, failed: bool) -> None:
        self.left -= 1
        self.failed += failed
        self.running = min(self.running, self.left)
        self._post()
        self.bar.update(1)

    def __enter__(self) -> "_Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()


def results_frame(sweep: Sweep, out: str | Path, processes: int | None = None, progress: bool = True) -> pd.DataFrame:
    """Run `sweep` with the local engine (resumable under out) and return its records_frame;
    raises if a cell failed, for scripts that need every cell."""
    return results_frames([(sweep, out)], processes, progress)[0]


def results_frames(runs: Sequence[tuple[Sweep, str | Path]], processes: int | None = None,
                   progress: bool = True) -> list[pd.DataFrame]:
    """results_frame of several (sweep, out), their cells in one pool (run_sweeps)."""
    results = run_sweeps(runs, "local", processes, progress=progress)
    for (_, out), (_, failed) in zip(runs, results):
        if failed:
            raise ConfigError(f"{len(failed)} cells failed; tracebacks in {out}/cells/*.error.json")
    return [records_frame(records) for records, _ in results]


def records_frame(records: list[dict]) -> pd.DataFrame:
    """One row per cell: its axes (trace, policy label, seed, ...) and its summary metrics."""
    rows = []
    for r in records:
        c = r["cell"]
        cluster = c[CLUSTER_AXIS] if CLUSTER_AXIS in c else f"{c['nodes']}x{c['gpus_per_node']}"
        rows.append({"trace": trace_label(c["trace"]), "policy": c["policy"]["label"], "world": c["world"],
                     "seed": c["seed"], "load": c["load"], "cluster": cluster,
                     "round_s": c["round_s"], "model": c["model"], "across_node": c["across_node"],
                     "racks": c["racks"], "uplink_gbps": c["uplink_gbps"], "variability": c["variability"],
                     "work": c["work"], "order": c.get("order"), "backfill": c.get("backfill"),
                     "opt_in": c["opt_in"], "penalty_scale": c["penalty_scale"], "budget": c["budget"],
                     **r["summary"], "cpu_s": r["cpu_s"], "key": r["key"]})
    return pd.DataFrame(rows)


def deterministic(record: dict) -> dict:
    """A record without its run-to-run timings: equal across runs of the same cell."""
    summary = {k: v for k, v in record["summary"].items() if k not in TIMING_KEYS}
    rounds = {k: v for k, v in record["rounds"].items() if k != "solve_ms"}
    return {**record, "summary": summary, "rounds": rounds, "cpu_s": None, "wall_s": None}
