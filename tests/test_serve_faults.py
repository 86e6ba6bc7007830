"""schedlab serve when its round workers die: the pool on its own, a real server, and the soak."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the workers are found and killed through /proc")

from schedlab.bench.soak import Service, run_soak, soak_failures  # noqa: E402
from schedlab.serve_pool import RoundFailed, RoundPool, WorkerDied  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = (ROOT / "examples" / "round-16x4.json").read_bytes()


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


def _until(condition, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


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


def _slow_round(limit_s: float) -> bytes:
    """A round that takes about its time limit: 400 jobs on 128 GPUs, CP-SAT with no proof in time."""
    import numpy as np

    from schedlab.bench import random_round
    from schedlab.io import round_input_to_dict
    from schedlab.state import Settings

    ri = random_round(np.random.default_rng(1), 128, 400, settings=Settings(solver="cpsat", time_limit_s=limit_s, mip_gap=0.0))
    return json.dumps(round_input_to_dict(ri)).encode()


def test_after_a_worker_is_killed_the_next_request_is_answered():
    with Service("--workers", "1") as srv:
        assert srv.solve(EXAMPLE)[0] == 200
        [victim] = srv.workers()
        os.kill(victim, signal.SIGKILL)
        # one look at /proc per check: two looks could see the dead worker, then no worker at all
        assert _until(lambda: (now := srv.workers()) != [victim] and len(now) == 1)  # replaced before any request
        new = srv.workers()
        time.sleep(0.5)
        assert srv.workers() == new  # a worker that stays
        status, answer = srv.solve(EXAMPLE)
        assert status == 200 and answer["verified"]


def test_a_round_in_flight_whose_worker_is_killed_is_answered():
    with Service("--workers", "1") as srv:
        answers: list = []
        slow = threading.Thread(target=lambda: answers.append(srv.solve(_slow_round(2.0))))
        slow.start()
        time.sleep(1.0)  # mid-solve
        [victim] = srv.workers()
        os.kill(victim, signal.SIGKILL)
        slow.join(timeout=60)
        assert answers and answers[0][0] == 200 and answers[0][1]["verified"]
        assert victim not in srv.workers() and srv.solve(EXAMPLE)[0] == 200


def test_a_round_whose_workers_are_killed_twice_gets_a_500_with_the_reason():
    with Service("--workers", "1") as srv:
        answers: list = []
        slow = threading.Thread(target=lambda: answers.append(srv.solve(_slow_round(4.0))))
        slow.start()
        time.sleep(1.0)
        [first] = srv.workers()
        os.kill(first, signal.SIGKILL)
        assert _until(lambda: srv.workers() not in ([], [first]))
        time.sleep(1.0)  # the retry is mid-solve on the new worker
        os.kill(srv.workers()[0], signal.SIGKILL)
        slow.join(timeout=60)
        status, answer = answers[0]
        assert status == 500 and answer["error"] == "failed"
        assert "so did the one that tried it again" in answer["problems"][0]
        assert srv.solve(EXAMPLE)[0] == 200


@pytest.mark.soak
def test_the_service_survives_a_soak_of_kills_disconnects_and_bad_rounds():
    figures = run_soak(seconds=float(os.environ.get("SCHEDLAB_SOAK_S", "60")))
    print(json.dumps(figures))
    assert soak_failures(figures) == [], figures
