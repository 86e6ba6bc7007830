"""The service's soak: a real `schedlab serve` on 127.0.0.1 under mixed traffic while its workers are killed.

For a bounded time, client threads post valid rounds (examples/round-16x4.json and small random
rounds) and malformed bodies; every few seconds one pool worker is killed with SIGKILL and one
client hangs up halfway through its body. Every request must be answered: 200 for a valid round,
a 4xx for a malformed one, and a 500 only for a round whose worker died and whose retry's worker
died too (counted apart). The server's memory (its own and its workers' RSS) must stay flat and
the service must be up at the end. Linux only: the workers and their memory are read from /proc.

    figures = run_soak(seconds=60)      # one JSON-able dict
    soak_failures(figures)              # what broke the promises above: [] when none did

`Service` starts and stops the server process; `pool_workers` and `tree_rss_bytes` read /proc.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Service", "SoakTraffic", "pool_workers", "run_soak", "soak_failures", "soak_traffic", "tree_rss_bytes"]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "round-16x4.json"  # a source checkout's, as the tests use
DIED_TWICE = "so did the one that tried it again"  # in the 500 of a round whose worker died on its retry too
MAX_RSS_GROWTH = 1.5  # memory at the end over memory after warm-up
REQUEST_TIMEOUT_S = 120.0
VALID_SHARE = 0.8  # of the bodies a client sends


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc (a process that ends meanwhile is left out)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return parent


def _descendants(pid: int) -> list[int]:
    parent = _parents()
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for child, p in parent.items() if p in frontier]
        found += frontier
    return found


def pool_workers(server_pid: int) -> list[int]:
    """The server's round workers: the children of its forkserver, i.e. its grandchildren (its
    own children are the forkserver and multiprocessing's resource tracker)."""
    parent = _parents()
    children = {c for c, p in parent.items() if p == server_pid}
    return sorted(c for c, p in parent.items() if p in children)


def tree_rss_bytes(pid: int) -> int:
    """The resident memory of a process and all its descendants, in bytes."""
    total_kib = 0
    for p in [pid, *_descendants(pid)]:
        try:
            lines = Path(f"/proc/{p}/status").read_text().splitlines()
        except OSError:  # ended meanwhile
            continue
        total_kib += sum(int(line.split()[1]) for line in lines if line.startswith("VmRSS:"))
    return total_kib * 1024


class Service:
    """`schedlab serve` on 127.0.0.1 and a free port, as a child process; its log goes to a file.

    Parameters
    ----------
    flags
        More arguments of `schedlab serve` (e.g. "--workers", "2").
    start_s
        How long it may take to answer its health check.
    """

    def __init__(self, *flags: str, start_s: float = 60.0) -> None:
        self.port = _free_port()
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "serve", "--port", str(self.port), *flags],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + start_s
        while time.monotonic() < deadline:
            try:
                self.request("GET", "/v1/health")
                return
            except OSError:
                time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError(f"the service did not start: {self.output()}")

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        """One request on a connection of its own: (status, the JSON body)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=REQUEST_TIMEOUT_S)
        try:
            conn.request(method, path, body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    def solve(self, body: bytes) -> tuple[int, Any]:
        """POST /v1/solve."""
        return self.request("POST", "/v1/solve", body)

    def hang_up_halfway(self, body: bytes) -> None:
        """Announce `body`, send half of it and close the connection."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=REQUEST_TIMEOUT_S) as s:
            s.sendall(b"POST /v1/solve HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body[: len(body) // 2]))

    def workers(self) -> list[int]:
        """The pids of the round workers now."""
        return pool_workers(self.proc.pid)

    def output(self) -> str:
        """What the server has logged so far."""
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def stop(self, timeout_s: float = 120.0) -> int:
        """SIGTERM, then wait: the server's exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)

    def __enter__(self) -> Service:
        return self

    def __exit__(self, *_: object) -> None:
        if self.proc.poll() is None:
            self.stop()
        self.log.close()


@dataclass(frozen=True)
class SoakTraffic:
    """The bodies the clients send: rounds to be answered, and malformed ones to be refused with a 4xx."""

    valid: tuple[bytes, ...]
    invalid: tuple[bytes, ...]


def soak_traffic(seed: int = 0, random_rounds: int = 24) -> SoakTraffic:
    """examples/round-16x4.json and small random rounds (8-32 GPUs, 3-12 jobs); malformed bodies
    of several kinds (not JSON, not UTF-8, not a round, bad fields, a solver the service refuses)."""
    import numpy as np

    from schedlab.bench.rounds import random_round
    from schedlab.io import round_input_to_dict
    from schedlab.state import Settings

    rng = np.random.default_rng(seed)
    example = json.loads(EXAMPLE.read_text())
    valid = [EXAMPLE.read_bytes()] + [
        json.dumps(round_input_to_dict(random_round(rng, int(rng.choice([8, 16, 32])), int(rng.integers(3, 13)),
                                                    settings=Settings(time_limit_s=5.0)))).encode()
        for _ in range(random_rounds)]
    invalid = [b"{not json", b"\xff\xfe", b"[]", b'{"jobs": 3}',
               json.dumps({**example, "jobs": [{**example["jobs"][0], "age_s": -1}]}).encode(),
               json.dumps({**example, "settings": {"solver": "cbc"}}).encode(),
               json.dumps({**example, "settings": {"mip_gap": -1}}).encode()]
    return SoakTraffic(tuple(valid), tuple(invalid))


def _verdict(valid: bool, status: int, answer: Any) -> str:
    """What one answer counts as: ok, died_twice, or the kind of a wrong answer."""
    if (valid and status == 200) or (not valid and 400 <= status < 500):
        return "ok"
    problems = answer.get("problems", []) if isinstance(answer, dict) else []
    if valid and status == 500 and any(DIED_TWICE in p for p in problems):
        return "died_twice"
    return f"{'valid' if valid else 'invalid'} answered {status}"


def _in_threads(targets: list[Any]) -> None:
    threads = [threading.Thread(target=t) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _client(service: Service, traffic: SoakTraffic, pick: random.Random, stop_at: float,
            record: Any) -> None:
    """Post one body after another until stop_at (the last one in flight then is answered too);
    record(status, verdict) for each."""
    while time.monotonic() < stop_at:
        valid = pick.random() < VALID_SHARE
        try:
            status, answer = service.solve(pick.choice(traffic.valid if valid else traffic.invalid))
            record(status, _verdict(valid, status, answer))
        except (OSError, http.client.HTTPException, ValueError) as exc:
            record(-1, f"no answer ({type(exc).__name__})")


def run_soak(seconds: float = 60.0, clients: int = 8, workers: int = 2, kill_every_s: float = 3.0,
             seed: int = 0) -> dict[str, Any]:
    """Soak a fresh service for `seconds`; the figures (see the module docstring and soak_failures).

    Parameters
    ----------
    seconds
        How long the clients send (each ends with its request in flight).
    clients
        Client threads, each posting one request after another; the service's queue is sized so
        that none is told 503.
    workers
        The service's round workers.
    kill_every_s
        Seconds between two worker kills (each with one client hanging up halfway).
    seed
        For the random rounds, each client's choice of bodies and the workers killed.
    """
    traffic = soak_traffic(seed)
    verdicts: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    lock = threading.Lock()

    def record(status: int, verdict: str) -> None:
        with lock:
            statuses[status] += 1
            verdicts[verdict] += 1

    with Service("--workers", str(workers), "--queue", str(clients + 2)) as service:
        # warm-up: rounds on every worker at once, so each has loaded the solvers before memory is read
        _in_threads([lambda k=k: service.solve(traffic.valid[k % len(traffic.valid)]) for k in range(4 * workers)])
        rss_start = tree_rss_bytes(service.proc.pid)
        kills = disconnects = 0
        stop_at = time.monotonic() + seconds
        senders = threading.Thread(target=_in_threads, args=([
            lambda k=k: _client(service, traffic, random.Random(seed * 1000 + k), stop_at, record)
            for k in range(clients)],))
        senders.start()
        killer = random.Random(seed)
        while time.monotonic() + kill_every_s < stop_at:
            time.sleep(kill_every_s)
            alive = service.workers()
            if alive:
                os.kill(killer.choice(alive), signal.SIGKILL)
                kills += 1
            service.hang_up_halfway(killer.choice(traffic.valid))
            disconnects += 1
        senders.join()
        time.sleep(1.0)  # the last kill's replacement has started
        rss_end = tree_rss_bytes(service.proc.pid)
        workers_end = len(service.workers())
        try:
            health = service.request("GET", "/v1/health")[0]
        except OSError:
            health = -1
        exit_status = service.stop()
    requests = sum(verdicts.values())
    return {"seconds": seconds, "clients": clients, "workers": workers, "requests": requests,
            "answered": requests - statuses[-1], "ok": verdicts["ok"], "died_twice_500": verdicts["died_twice"],
            "wrong": {v: n for v, n in verdicts.items() if v not in ("ok", "died_twice")},
            "statuses": {str(s): n for s, n in sorted(statuses.items())},
            "worker_kills": kills, "workers_at_end": workers_end, "disconnects": disconnects,
            "rss_start_mb": round(rss_start / 2**20, 1), "rss_end_mb": round(rss_end / 2**20, 1),
            "rss_growth": round(rss_end / rss_start, 3), "health_at_end": health, "exit_status": exit_status}


def soak_failures(figures: dict[str, Any]) -> list[str]:
    """The soak's promises that its figures break: an empty list when the service kept them all."""
    checks = {
        "every request answered as it should be (200 valid, 4xx malformed, 500 only if its worker died twice)":
            not figures["wrong"],
        f"memory at the end within {MAX_RSS_GROWTH}x of after warm-up": figures["rss_growth"] <= MAX_RSS_GROWTH,
        "the service up at the end (health 200)": figures["health_at_end"] == 200,
        "every killed worker replaced": figures["workers_at_end"] == figures["workers"],
        "a worker killed at least once": figures["worker_kills"] > 0,
        "a clean exit on SIGTERM": figures["exit_status"] in (0, -signal.SIGTERM),
    }
    return [promise for promise, kept in checks.items() if not kept]
