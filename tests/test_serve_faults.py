"""schedlab serve when its round workers die: the pool on its own."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the workers are found and killed through /proc")

from schedlab.serve_pool import RoundFailed, RoundPool, WorkerDied  # noqa: E402


def _die_once(marker: str) -> int:
    """Kill the worker the first time (the marker file does not exist yet); then answer its pid."""
    if not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return os.getpid()


def _die(tries: str) -> None:
    with open(tries, "a") as f:
        f.write("x")
    os.kill(os.getpid(), signal.SIGKILL)


def _raise() -> None:
    raise ValueError("a bug")


async def _with_pool(size: int, body):
    pool = RoundPool(size)
    await pool.start()
    try:
        return await body(pool)
    finally:
        await pool.close(grace_s=10)


def test_a_round_whose_worker_dies_is_tried_again_on_a_fresh_worker(tmp_path):
    async def body(pool):
        first = pool.pids()
        pid = await pool.run(_die_once, str(tmp_path / "died"))
        return first, pid, pool.deaths, pool.pids()

    first, pid, deaths, pids = asyncio.run(_with_pool(1, body))
    assert deaths == 1 and pid not in first and pids == [pid]


def test_a_round_whose_worker_dies_twice_fails_with_the_reason_and_the_pool_lives_on(tmp_path):
    tries = tmp_path / "tries"

    async def body(pool):
        with pytest.raises(WorkerDied, match="so did the one that tried it again"):
            await pool.run(_die, str(tries))
        with pytest.raises(RoundFailed, match="ValueError: a bug"):  # the worker's traceback
            await pool.run(_raise)
        return await pool.run(os.getpid), pool.pids()

    pid, pids = asyncio.run(_with_pool(2, body))
    assert tries.read_text() == "xx" and len(pids) == 2 and pid in pids


def test_a_killed_idle_worker_is_replaced_without_waiting_for_a_round():
    async def body(pool):
        victim = pool.pids()[0]
        os.kill(victim, signal.SIGKILL)
        for _ in range(300):  # the pool is never asked for a round meanwhile
            if pool.deaths and len(pool.pids()) == 2:
                break
            await asyncio.sleep(0.05)
        return victim, pool.pids()

    victim, pids = asyncio.run(_with_pool(2, body))
    assert victim not in pids and len(pids) == 2
