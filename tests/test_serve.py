"""schedlab serve, as a client sees it: a real server process on a free port, plain HTTP."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = json.loads((ROOT / "examples" / "round-16x4.json").read_text())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, *flags: str) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "schedlab.cli", "serve", "--port", str(self.port), *flags],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.get("/v1/health")
                return
            except OSError:
                time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError(f"server did not start: {self.proc.stdout.read()}")

    def request(self, path: str, body: bytes | None = None) -> tuple[int, dict, dict]:
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=body, method="POST" if body else "GET")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.status, json.loads(resp.read()), dict(resp.headers)
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read()), dict(err.headers)

    def get(self, path: str) -> dict:
        return self.request(path)[1]

    def solve(self, raw) -> tuple[int, dict, dict]:
        return self.request("/v1/solve", json.dumps(raw).encode())

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=60)
        return out


@pytest.fixture(scope="module")
def server():
    srv = Server("--workers", "1")
    yield srv
    srv.stop()


def _slow_round(limit_s: float) -> dict:
    """A round that takes about its time limit: 400 jobs on 128 GPUs, CP-SAT with no proof in time."""
    import numpy as np

    from schedlab.bench import random_round
    from schedlab.io import round_input_to_dict
    from schedlab.state import Settings

    ri = random_round(np.random.default_rng(1), 128, 400, settings=Settings(solver="cpsat", time_limit_s=limit_s, mip_gap=0.0))
    return round_input_to_dict(ri)


def test_a_round_is_answered_with_the_published_result(server):
    status, result, headers = server.solve(EXAMPLE)
    assert status == 200 and headers["content-type"] == "application/json"
    jsonschema.validate(result, json.loads((ROOT / "schedlab" / "schemas" / "round_result.schema.json").read_text()))
    from schedlab import solve_round

    assert result["objective"] == pytest.approx(solve_round(EXAMPLE).objective)


def test_bad_input_gets_a_400_listing_every_bad_field_and_the_server_lives_on(server):
    raw = {**EXAMPLE, "settings": {"time_limit": 5, "solver": "cbc"}, "jobs": [{**EXAMPLE["jobs"][0], "age_s": -1}]}
    status, body, _ = server.solve(raw)
    assert status == 400 and body["error"] == "invalid_input"
    fields = {p.split(":")[0] for p in body["problems"]}
    assert {"settings.solver", "settings.time_limit", "jobs[0].age_s"} <= fields
    status, body, _ = server.request("/v1/solve", b"\xff{not json")
    assert status == 400 and "not UTF-8" in body["problems"][0]
    assert server.solve(EXAMPLE)[0] == 200


def test_a_solver_path_never_runs(server, tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "solver.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    status, body, _ = server.solve({**EXAMPLE, "settings": {"solver": str(script)}})
    assert status == 400 and body["problems"][0].startswith("settings.solver")
    assert not marker.exists()


def test_solver_options_are_refused_unless_the_operator_allows_them():
    from schedlab.serve import ServeConfig, solve_request

    body = json.dumps({**EXAMPLE, "settings": {"solver": "highs", "solver_options": {"mip_rel_gap": 0.0}}}).encode()
    status, answer = solve_request(body, ServeConfig())
    assert status == 400 and answer["problems"][0].startswith("settings.solver_options: this service takes no")
    status, answer = solve_request(body, ServeConfig(allow_solver_options=True))
    assert status == 200 and answer["status"] == "optimal"


def test_schema_registries_and_openapi_are_published(server):
    assert server.get("/v1/schema")["title"]
    assert set(server.get("/v1/registries")["formulations"]) == {"goodput", "joint", "placement"}
    api = server.get("/v1/openapi.json")
    assert api["openapi"].startswith("3.1") and "/v1/solve" in api["paths"]
    assert api["components"]["schemas"]["RoundInput"] == server.get("/v1/schema")


def test_beyond_workers_and_queue_a_round_is_told_503_with_retry_after():
    srv = Server("--workers", "1", "--queue", "0")
    try:
        slow = threading.Thread(target=srv.solve, args=(_slow_round(3.0),))
        slow.start()
        time.sleep(1.0)  # the slow round holds the only worker
        status, body, headers = srv.solve(EXAMPLE)
        slow.join()
        assert status == 503 and body["error"] == "busy" and headers["retry-after"] == "1"
        assert srv.solve(EXAMPLE)[0] == 200  # admitted again once the worker is free
    finally:
        srv.stop()


def test_sigterm_lets_the_round_in_flight_finish():
    srv = Server("--workers", "1")
    answers: list = []
    slow = threading.Thread(target=lambda: answers.append(srv.solve(_slow_round(2.0))))
    slow.start()
    time.sleep(1.0)
    srv.proc.send_signal(signal.SIGTERM)
    slow.join(timeout=60)
    srv.proc.wait(timeout=60)
    assert answers and answers[0][0] == 200 and answers[0][1]["verified"]
    assert srv.proc.returncode in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once drained
    assert "Traceback" not in srv.proc.stdout.read()


def test_the_shell_client_prints_the_allocations_and_the_problems(server, tmp_path):
    client = ROOT / "examples" / "schedlab-client.sh"
    url = f"http://127.0.0.1:{server.port}"
    ok = subprocess.run([str(client), str(ROOT / "examples" / "round-16x4.json"), url], capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.startswith("status optimal")
    assert len(ok.stdout.strip().splitlines()) == 1 + len(EXAMPLE["jobs"])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**EXAMPLE, "settings": {"mip_gap": -1}}))
    refused = subprocess.run([str(client), str(bad), url], capture_output=True, text=True)
    assert refused.returncode == 2 and "settings.mip_gap" in refused.stderr


@pytest.mark.parametrize("policy", ["pollux", "tiresias"])  # tiresias: its queues live in the service
def test_a_replay_driven_through_the_service_matches_the_local_replay(server, tmp_path, policy):
    import numpy as np

    from schedlab.traces import synthetic_workload

    workload = tmp_path / "w.csv"
    synthetic_workload(8, 2.0, np.random.default_rng(3), mix={"ncf": 1, "cifar10": 1}).to_csv(workload, index=False)
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "service_replay.py"), "--workload", str(workload),
                          "--policy", policy, "--url", f"http://127.0.0.1:{server.port}"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures["rounds"] > 10
    assert figures["service_mean_jct_s"] == figures["local_mean_jct_s"]


def test_a_policy_state_holds_one_policy_and_can_be_forgotten(server):
    body = json.dumps(EXAMPLE).encode()
    assert server.request("/v1/policies/tiresias/rounds?state_id=a", body)[0] == 200
    status, answer, _ = server.request("/v1/policies/fifo/rounds?state_id=a", body)
    assert status == 409 and "holds a tiresias policy" in answer["problems"][0]
    status, answer, _ = server.request("/v1/policies/nosuch/rounds?state_id=b", body)
    assert status == 400 and answer["problems"][0].startswith("policy: unknown policy 'nosuch'")
    status, answer, _ = server.request("/v1/policies/tiresias/rounds?state_id=../x", body)
    assert status == 400 and answer["problems"][0].startswith("state_id")
    delete = urllib.request.Request(f"http://127.0.0.1:{server.port}/v1/states/a", method="DELETE")
    with urllib.request.urlopen(delete) as resp:
        assert resp.status == 204
    assert server.request("/v1/policies/fifo/rounds?state_id=a", body)[0] == 200  # a fresh state


def test_a_body_over_the_limit_is_refused_even_without_a_length():
    srv = Server("--workers", "1", "--max-body-mb", "1")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        conn.putrequest("POST", "/v1/solve")
        conn.putheader("Transfer-Encoding", "chunked")  # no Content-Length to refuse it by
        conn.endheaders()
        chunk = b"x" * 2**16
        for _ in range(40):  # 2.5 MiB
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
        resp = conn.getresponse()
        assert resp.status == 413 and json.loads(resp.read())["error"] == "too_large"
        assert srv.solve(EXAMPLE)[0] == 200
    finally:
        srv.stop()


def test_concurrent_clients_each_get_their_own_answer(server):
    import numpy as np

    from schedlab.bench import random_round
    from schedlab.io import round_input_to_dict

    rounds = [round_input_to_dict(random_round(np.random.default_rng(k), 16, 6)) for k in range(8)]
    answers: dict[int, tuple] = {}
    threads = [threading.Thread(target=lambda k=k: answers.__setitem__(k, server.solve(rounds[k]))) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(answers[k][0] == 200 for k in range(8))  # 8 at once fit the 1 worker + 16 queued
    for k in range(8):
        assert [a["job_id"] for a in answers[k][1]["allocations"]] == [j["id"] for j in rounds[k]["jobs"]]


def test_a_round_on_a_cluster_of_three_gpu_types_is_answered_by_the_service(server):
    import numpy as np

    from schedlab import solve_round
    from schedlab.bench import random_round
    from schedlab.clusters import parse_pools
    from schedlab.io import round_input_to_dict

    raw = round_input_to_dict(random_round(np.random.default_rng(2), 0, 30, pools=parse_pools("v100:2x4,p100:2x4,k80:2x4")))
    status, result, _ = server.solve(raw)
    assert status == 200 and result["status"] == "optimal"
    assert result["objective"] == pytest.approx(solve_round(raw).objective)
    type_of = {node["id"]: node["gpu_type"] for node in raw["cluster"]["nodes"]}
    placed = [{type_of[g["node"]] for g in a["gpus"]} for a in result["allocations"] if a["gpus"]]
    assert placed and all(len(types) == 1 for types in placed)
    assert {t for types in placed for t in types} == {"v100", "p100", "k80"}


def test_the_service_answers_a_mixed_round_with_per_type_limits_a_projected_type_and_a_pinned_job(server):
    from test_mixed_round import PINNED_GPUS, mixed_round

    from schedlab import solve_round

    raw = mixed_round()
    status, result, _ = server.solve(raw)
    direct = solve_round(raw)
    assert status == 200 and result["status"] == "optimal" and result["verified"]
    assert result["objective"] == pytest.approx(direct.objective, rel=1e-9)
    by_id = {a["job_id"]: a for a in result["allocations"]}
    assert by_id["pinned"]["gpus"] == PINNED_GPUS
    assert [a["projected"] for a in result["allocations"]] == [a.projected for a in direct.allocations]
    assert any(a["projected"] for a in result["allocations"])
