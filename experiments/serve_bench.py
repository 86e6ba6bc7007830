"""The embedding figures: a service on 127.0.0.1 started and stopped by this script.

    python experiments/serve_bench.py [--rounds 200] [--clients 32] [--per-client 200] [--json]

  curl      per-round latency of a non-Python client (curl, one process, keep-alive) on
            examples/round-16x4.json, warm: p50 / p99
  stream    the same rounds through `schedlab solve --stream`, one line in, one line out
  startup   `python -c "import schedlab"` and `schedlab --help`, median of 5 runs
  load      `clients` concurrent clients x `per_client` random 64-GPU rounds: errors, lost
            requests, p50 / p99 latency, rounds per second (bounded: --load-s)
  malformed mutated rounds (fuzz_rounds) until 40 kinds (mutation x field) were refused:
            every refusal a 4xx naming the field (or the body), the service up after each
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from schedlab.io import json_text

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "round-16x4.json"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ms(samples: list[float], q: float) -> float:
    return round(float(np.percentile(samples, q)) * 1e3, 2)


class Service:
    def __init__(self, workers: int, queue: int) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "serve", "--port", str(self.port),
                                      "--workers", str(workers), "--queue", str(queue)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.post("/v1/health", None)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the service did not start")

    def post(self, path: str, body: bytes | None, conn: http.client.HTTPConnection | None = None) -> tuple[int, Any]:
        own = conn is None
        conn = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        conn.request("POST" if body is not None else "GET", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        out = resp.status, json.loads(resp.read())
        if own:
            conn.close()
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=120)


def curl_latency(service: Service, rounds: int) -> dict[str, float]:
    """One curl process sending `rounds` requests on one connection; curl's own time per request."""
    with tempfile.NamedTemporaryFile("w", suffix=".curl", delete=False) as cfg:
        for k in range(rounds + 10):  # 10 warm-up requests first
            cfg.write(("next\n" if k else "") + f'url = "http://127.0.0.1:{service.port}/v1/solve"\n'
                      f'data-binary = "@{EXAMPLE}"\nheader = "Content-Type: application/json"\n'
                      'output = "/dev/null"\nwrite-out = "%{http_code} %{time_total}\\n"\nsilent\n')
    out = subprocess.run(["curl", "-K", cfg.name], capture_output=True, text=True, check=True).stdout.split()
    os.unlink(cfg.name)
    codes, times = out[0::2], [float(t) for t in out[1::2]][10:]
    return {"p50_ms": _ms(times, 50), "p99_ms": _ms(times, 99), "rounds": len(times),
            "non_200": sum(c != "200" for c in codes)}


def stream_latency(rounds: int) -> dict[str, float]:
    line = json.dumps(json.loads(EXAMPLE.read_text())) + "\n"
    proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "solve", "--stream"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None  # both piped above
    times = []
    for k in range(rounds + 10):
        t0 = time.perf_counter()
        proc.stdin.write(line)
        proc.stdin.flush()
        json.loads(proc.stdout.readline())
        if k >= 10:
            times.append(time.perf_counter() - t0)
    proc.stdin.close()
    proc.wait(timeout=60)
    return {"p50_ms": _ms(times, 50), "p99_ms": _ms(times, 99), "rounds": len(times)}


def startup() -> dict[str, float]:
    def median_s(cmd: list[str]) -> float:
        runs = []
        for _ in range(5):
            t0 = time.perf_counter()
            subprocess.run(cmd, capture_output=True, check=True)
            runs.append(time.perf_counter() - t0)
        return round(statistics.median(runs), 3)
    return {"import_s": median_s([sys.executable, "-c", "import schedlab"]),
            "help_s": median_s([sys.executable, "-m", "schedlab.cli", "--help"])}


def load(service: Service, clients: int, per_client: int, limit_s: float) -> dict[str, Any]:
    from schedlab.bench import random_round
    from schedlab.io import round_input_to_dict
    from schedlab.state import Settings

    rng = np.random.default_rng(0)
    bodies = [json.dumps(round_input_to_dict(random_round(rng, 64, 32, settings=Settings(time_limit_s=5.0)))).encode()
              for _ in range(50)]
    latencies: list[float] = []
    statuses: list[int] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + limit_s

    def client(c: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=120)
        for k in range(per_client):
            if time.monotonic() > stop_at:
                break
            t0 = time.perf_counter()
            try:
                status, _ = service.post("/v1/solve", bodies[(c * per_client + k) % len(bodies)], conn)
            except (OSError, http.client.HTTPException):
                status = -1
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", service.port, timeout=120)
            with lock:
                latencies.append(time.perf_counter() - t0)
                statuses.append(status)
        conn.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall_s = time.perf_counter() - t0
    answered = sum(s == 200 for s in statuses)
    return {"clients": clients, "sent": len(statuses), "answered": answered,
            "busy_503": statuses.count(503), "errors": sum(s not in (200, 503) for s in statuses),
            "lost": clients * per_client - len(statuses), "p50_ms": _ms(latencies, 50), "p99_ms": _ms(latencies, 99),
            "rounds_per_s": round(answered / wall_s, 1), "wall_s": round(wall_s, 1)}


def malformed(service: Service, kinds_wanted: int = 40) -> dict[str, Any]:
    from schedlab.bench import mutated_case

    rng = np.random.default_rng(7)
    refused: dict[str, int] = {}
    unnamed, not_4xx, sent = [], [], 0
    while len(refused) < kinds_wanted and sent < 5000:
        kind, path, data = mutated_case(rng)
        sent += 1
        status, body = service.post("/v1/solve", data)
        if status == 200:
            continue
        field = ".".join(str(p) for p in path if not isinstance(p, int))
        key = f"{kind} {field}"
        if not 400 <= status < 500:
            not_4xx.append(f"{key}: {status}")
            continue
        names = [str(p) for p in path if isinstance(p, str)][-1:] + ["body"]
        if not any(re.search(rf"\b{re.escape(n)}\b", p) for p in body["problems"] for n in names):
            unnamed.append(f"{key}: {body['problems'][0][:100]}")
        refused[key] = status
    alive = service.post("/v1/health", None)[0] == 200
    return {"kinds": len(refused), "sent": sent, "not_4xx": not_4xx, "field_not_named": unnamed, "service_up": alive}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="rounds per latency measure")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--per-client", type=int, default=200)
    parser.add_argument("--load-s", type=float, default=300.0, help="the load test stops sending after this")
    parser.add_argument("--json", action="store_true", help="end with one JSON line")
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"startup": startup()}
    print("startup", out["startup"], flush=True)
    out["stream"] = stream_latency(args.rounds)
    print("stream", out["stream"], flush=True)
    service = Service(workers=os.cpu_count() or 1, queue=args.clients)
    try:
        out["curl"] = curl_latency(service, args.rounds)
        print("curl", out["curl"], flush=True)
        out["load"] = load(service, args.clients, args.per_client, args.load_s)
        print("load", out["load"], flush=True)
        out["malformed"] = malformed(service)
        print("malformed", out["malformed"], flush=True)
    finally:
        service.stop()
    if args.json:
        print(json_text(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
