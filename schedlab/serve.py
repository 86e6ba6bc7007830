"""schedlab serve: rounds over HTTP with JSON, for schedulers that are not written in Python.

    POST /v1/solve          a round (schemas/round_input.schema.json) -> its result
                            (schemas/round_result.schema.json); 400 with every bad field
                            ({"error": "invalid_input", "problems": [...]}), 413 above the body
                            limit, 503 when every worker is busy and the queue is full
    GET  /v1/health         {"status": "ok", "version", "workers", "in_flight", "capacity"}
    GET  /v1/schema         the round input schema; /v1/schema/result the result's
    GET  /v1/registries     the formulations and the solvers a request may name
    GET  /v1/openapi.json   this API as OpenAPI 3.1

Rounds are solved on a pool of processes (one per core by default), so a round never blocks
the server; at most `workers + queue` rounds are admitted at once, the rest are told 503 with
Retry-After. A round's time limit is its own (settings.time_limit_s), at most the operator's
`max_time_limit_s`. Only the array solvers (highs, cpsat, portfolio) run unless the operator
enables more of the registry (`allow_solvers`): a request never names a program. SIGTERM stops
accepting connections and lets the rounds in flight finish (uvicorn's graceful shutdown).

Built on Starlette and uvicorn (the `serve` extra); the rounds are solve_round's, unchanged.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from schedlab import __version__
from schedlab.errors import InputError, SchedlabError
from schedlab.state import Settings

ARRAY_SOLVERS = ("highs", "cpsat", "portfolio")
SCHEMAS = Path(__file__).parent / "schemas"


@dataclass(frozen=True)
class ServeConfig:
    """The operator's settings (never the request's)."""

    workers: int = field(default_factory=lambda: os.cpu_count() or 1)
    queue: int = 16  # rounds admitted beyond the busy workers before 503
    max_time_limit_s: float = 60.0
    max_body_bytes: int = 64 * 2**20  # the largest round the schema allows is ~40 MB
    allow_solvers: tuple[str, ...] = ARRAY_SOLVERS


def solve_request(body: bytes, config: ServeConfig) -> tuple[int, dict[str, Any]]:
    """One request's round, solved in a worker process: (HTTP status, JSON body)."""
    from schedlab.api import solve_round
    from schedlab.io import error_to_dict, load_json, parse_round_input, round_result_to_dict

    try:
        raw = load_json(body, "body")
        settings = raw.get("settings", {}) if isinstance(raw, dict) else {}
        settings = settings if isinstance(settings, dict) else {}
        problems = _operator_limits(settings, config)
        if problems:  # with every other bad field of the round
            try:
                parse_round_input(raw)
            except InputError as exc:
                problems += exc.problems
            raise InputError(problems)
        limit_s = settings.get("time_limit_s", Settings.time_limit_s)
        capped = min(limit_s, config.max_time_limit_s) if isinstance(limit_s, (int, float)) else None
        return 200, round_result_to_dict(solve_round(raw, time_limit_s=capped))
    except InputError as exc:
        return 400, error_to_dict(exc)
    except SchedlabError as exc:
        return 500, error_to_dict(exc)


def _operator_limits(settings: dict, config: ServeConfig) -> list[str]:
    solver = settings.get("solver", "portfolio")
    if isinstance(solver, str) and solver not in config.allow_solvers:
        return [f"settings.solver: {solver!r} is not enabled on this service; use one of "
                f"{', '.join(config.allow_solvers)} (the operator enables others with --allow-solver)"]
    return []


class Admission:
    """At most `capacity` rounds in the service at once (running or queued for a worker)."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.in_flight = capacity, 0

    def try_enter(self) -> bool:
        if self.in_flight >= self.capacity:
            return False
        self.in_flight += 1
        return True

    def leave(self) -> None:
        self.in_flight -= 1


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    # allow_nan=False: no NaN or Infinity ever reaches a client (results use null)
    return Response(json.dumps(body, allow_nan=False), status, headers, media_type="application/json")


def openapi() -> dict[str, Any]:
    """This API as OpenAPI 3.1, with the published JSON schemas as its components."""
    round_input = json.loads((SCHEMAS / "round_input.schema.json").read_text())
    round_result = json.loads((SCHEMAS / "round_result.schema.json").read_text())
    error = {"type": "object", "required": ["error", "problems"], "properties": {
        "error": {"enum": ["invalid_input", "failed", "busy", "too_large"]},
        "problems": {"type": "array", "items": {"type": "string"}}}}
    as_json = lambda ref: {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ref}"}}}}  # noqa: E731
    return {
        "openapi": "3.1.0",
        "info": {"title": "schedlab", "version": __version__,
                 "description": "Every round of a GPU-cluster scheduler as an optimization model."},
        "paths": {
            "/v1/solve": {"post": {
                "summary": "Solve one round", "requestBody": {"required": True, **as_json("RoundInput")},
                "responses": {"200": {"description": "a verified allocation", **as_json("RoundResult")},
                              "400": {"description": "invalid round: every bad field", **as_json("Error")},
                              "413": {"description": "body above the service's limit", **as_json("Error")},
                              "503": {"description": "every worker busy, the queue full", **as_json("Error")}}}},
            "/v1/health": {"get": {"summary": "Liveness and load", "responses": {"200": {"description": "ok"}}}},
            "/v1/schema": {"get": {"summary": "The round input schema", "responses": {"200": {"description": "ok"}}}},
            "/v1/schema/result": {"get": {"summary": "The result schema", "responses": {"200": {"description": "ok"}}}},
            "/v1/registries": {"get": {"summary": "Formulations and solvers by name",
                                       "responses": {"200": {"description": "ok"}}}},
        },
        "components": {"schemas": {"RoundInput": round_input, "RoundResult": round_result, "Error": error}},
    }


def make_app(config: ServeConfig) -> Starlette:
    admission = Admission(config.workers + config.queue)
    pool: dict[str, ProcessPoolExecutor] = {}

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        pool["rounds"] = ProcessPoolExecutor(max_workers=config.workers)
        try:
            yield
        finally:
            pool["rounds"].shutdown(wait=True)  # after uvicorn drained the requests in flight

    async def solve(request: Request) -> Response:
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > config.max_body_bytes:
            return _json({"error": "too_large", "problems": [
                f"body: {int(size):,} bytes; this service takes at most {config.max_body_bytes:,}"]}, 413)
        if not admission.try_enter():
            return _json({"error": "busy", "problems": [
                f"all {config.workers} workers busy and {config.queue} rounds queued; retry shortly"]}, 503,
                {"Retry-After": "1"})
        try:
            body = await request.body()
            if len(body) > config.max_body_bytes:
                return _json({"error": "too_large", "problems": [
                    f"body: over {config.max_body_bytes:,} bytes, the most this service takes"]}, 413)
            status, out = await asyncio.get_running_loop().run_in_executor(pool["rounds"], solve_request, body, config)
            return _json(out, status)
        finally:
            admission.leave()

    async def health(_: Request) -> Response:
        return _json({"status": "ok", "version": __version__, "workers": config.workers,
                      "in_flight": admission.in_flight, "capacity": admission.capacity})

    async def registries(_: Request) -> Response:
        from schedlab.formulations import FORMULATIONS

        return _json({"formulations": sorted(FORMULATIONS), "solvers": list(config.allow_solvers)})

    def static(document: dict[str, Any]):
        async def endpoint(_: Request) -> Response:
            return _json(document)
        return endpoint

    return Starlette(routes=[
        Route("/v1/solve", solve, methods=["POST"]),
        Route("/v1/health", health),
        Route("/v1/schema", static(json.loads((SCHEMAS / "round_input.schema.json").read_text()))),
        Route("/v1/schema/result", static(json.loads((SCHEMAS / "round_result.schema.json").read_text()))),
        Route("/v1/registries", registries),
        Route("/v1/openapi.json", static(openapi())),
    ], lifespan=lifespan)


def serve(config: ServeConfig, host: str = "127.0.0.1", port: int = 8080, graceful_s: float = 120.0) -> None:
    """Run until SIGTERM or SIGINT; rounds in flight get up to graceful_s to finish."""
    import uvicorn

    uvicorn.run(make_app(config), host=host, port=port, timeout_graceful_shutdown=graceful_s, log_level="info")
