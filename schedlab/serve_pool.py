"""The service's round workers: processes that solve one round at a time, each replaced the moment it dies.

A worker that dies (killed, out of memory) is noticed when it exits, not when the next round
meets it: the event loop watches every worker's process sentinel, and a new worker is started at
once. Rounds waiting for a worker run on the new ones. The round a dead worker was solving runs
again, once, on another worker (a round's answer depends on its input alone); if that worker dies
too, the round fails with WorkerDied.

Each worker has a pipe of its own (no lock shared between workers that a killed worker could
take with it), and is started by a forkserver: a forked child would inherit the thread pools
(BLAS, solver threads) of the server's policy-state threads with their locks held, and hang on
their first use. A worker ends when its pipe closes, so none outlives the server.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import multiprocessing
import multiprocessing.util  # before start() registers its exit hook: hooks run last-registered first
import signal
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["RoundFailed", "RoundPool", "WorkerDied"]

log = logging.getLogger(__name__)
SPAWN_RETRY_S = 1.0  # a worker that cannot be started (no memory, no processes left) is started again after this


class WorkerDied(Exception):
    """The workers a round ran on died on every attempt (killed, or out of memory)."""


class RoundFailed(Exception):
    """The round's function raised in its worker; the message holds the worker's traceback."""


class _Unstarted(Exception):
    """The worker was dead before it could take the round: the round never ran."""


@dataclass(frozen=True)
class _Worker:
    process: BaseProcess
    conn: Connection  # the server's end of the worker's pipe
    pid: int  # kept here: a closed process object no longer tells it


def _work(conn: Connection) -> None:
    """A worker's life: call what comes down the pipe and send back (True, value), or (False,
    traceback) if it raised, until the server closes the pipe."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C reaches the group: the server drains first
    while True:
        try:
            function, args = conn.recv()
        except EOFError:
            return
        try:
            conn.send((True, function(*args)))
        except Exception:
            conn.send((False, traceback.format_exc()))


def _spawn(context: multiprocessing.context.BaseContext) -> _Worker:
    here, there = multiprocessing.Pipe()
    # not daemonic: a partitioned round starts processes of its own
    process = context.Process(target=_work, args=(there,), name="schedlab-round-worker")  # type: ignore[attr-defined]
    process.start()
    there.close()  # the worker's end lives in the worker only: its death closes the pipe
    return _Worker(process, here, process.pid or 0)


def _call(worker: _Worker, function: Callable[..., Any], args: tuple) -> Any:
    """One round on one worker, on a thread of the server: its value; WorkerDied if the worker
    died on it, _Unstarted if it was dead before, RoundFailed if the function raised."""
    try:
        worker.conn.send((function, args))
    except OSError as exc:
        raise _Unstarted from exc
    try:
        if worker.conn in wait([worker.conn, worker.process.sentinel]):
            done, value = worker.conn.recv()
            if done:
                return value
            raise RoundFailed(value)
    except (EOFError, OSError):
        pass
    raise WorkerDied


class RoundPool:
    """`size` worker processes (kept whatever dies), each solving one round at a time; see the module docstring."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.deaths = 0  # workers that died while the pool ran
        self._context = multiprocessing.get_context("forkserver")
        self._live: dict[int, _Worker] = {}  # pid -> worker, until its death is noticed
        self._busy: set[int] = set()  # pids solving a round
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()  # may hold dead workers: taking skips them
        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="round-spawn")  # one start at a time
        self._calls = ThreadPoolExecutor(max_workers=size, thread_name_prefix="round-call")
        self._starting: set[asyncio.Task] = set()
        self._closing = False

    def pids(self) -> list[int]:
        """The process ids of the live workers."""
        return sorted(self._live)

    async def start(self) -> None:
        """Start the workers; returns once all are up."""
        atexit.register(self._abandon)  # a server that exits without close() (a second Ctrl-C) waits for no idle worker
        await asyncio.gather(*(self._add_worker() for _ in range(self.size)))

    async def run(self, function: Callable[..., Any], *args: Any) -> Any:
        """`function(*args)` in a worker process: its value.

        Raises
        ------
        WorkerDied
            If the round's worker died, and so did the one that tried it again.
        RoundFailed
            If the function raised (with the worker's traceback).
        """
        tried_again = False
        while True:
            worker = await self._take()
            try:
                return await self._attempt(worker, function, args)
            except _Unstarted:
                continue
            except WorkerDied as exc:
                if tried_again:
                    raise WorkerDied(
                        "the worker solving this round died, and so did the one that tried it again (killed, or out of "
                        "memory); the service started new workers: retry, or send a smaller round") from exc
                tried_again = True

    async def close(self, grace_s: float) -> None:
        """Stop the workers: each ends after its round in flight; one still running after grace_s is killed."""
        self._closing = True
        atexit.unregister(self._abandon)
        for task in list(self._starting):
            task.cancel()
        loop = asyncio.get_running_loop()
        workers = list(self._live.values())
        for worker in workers:
            loop.remove_reader(worker.process.sentinel)
            worker.conn.close()  # the worker's recv ends: it exits

        def join_all() -> None:
            for worker in workers:
                worker.process.join(grace_s)
                if worker.process.is_alive():
                    worker.process.kill()
                    worker.process.join()
        await loop.run_in_executor(None, join_all)
        self._live.clear()
        self._calls.shutdown(wait=True)
        self._spawner.shutdown(wait=True)

    async def _take(self) -> _Worker:
        while True:
            worker = await self._idle.get()
            if worker.pid in self._live:
                self._busy.add(worker.pid)
                return worker

    async def _attempt(self, worker: _Worker, function: Callable[..., Any], args: tuple) -> Any:
        call = asyncio.get_running_loop().run_in_executor(self._calls, _call, worker, function, args)
        # the worker returns when its call ends, even if the request that waits on it is cancelled
        call.add_done_callback(lambda _: self._release(worker))
        return await asyncio.shield(call)

    def _release(self, worker: _Worker) -> None:
        self._busy.discard(worker.pid)
        if worker.pid in self._live:
            self._idle.put_nowait(worker)
        else:
            self._retire(worker)

    def _abandon(self) -> None:
        """At exit: close every worker's pipe, so each ends after its round in flight."""
        for worker in self._live.values():
            worker.conn.close()

    @staticmethod
    def _retire(worker: _Worker) -> None:
        """Free what the server holds of a dead worker (its pipe, its sentinel)."""
        worker.conn.close()
        worker.process.join()  # at once: its sentinel said it ended
        worker.process.close()

    async def _add_worker(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            try:
                worker = await loop.run_in_executor(self._spawner, _spawn, self._context)
            except (OSError, EOFError):  # EOFError: the forkserver died while starting it
                await asyncio.sleep(SPAWN_RETRY_S)
                continue
            if self._closing:
                worker.conn.close()
                return
            self._live[worker.pid] = worker
            loop.add_reader(worker.process.sentinel, self._on_exit, worker)
            self._idle.put_nowait(worker)
            return

    def _on_exit(self, worker: _Worker) -> None:
        """A worker's process ended: forget it and start another at once."""
        asyncio.get_running_loop().remove_reader(worker.process.sentinel)
        if self._live.pop(worker.pid, None) is None or self._closing:
            return
        self.deaths += 1
        log.warning("round worker %d ended (exit code %s)%s; starting another", worker.pid, worker.process.exitcode,
                    ": its round runs again" if worker.pid in self._busy else "")
        if worker.pid not in self._busy:  # a busy worker is retired by its call's release
            self._retire(worker)
        task = asyncio.ensure_future(self._add_worker())
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)
