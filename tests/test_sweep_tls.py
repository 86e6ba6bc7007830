"""Sweeps on a Dask scheduler over TLS: the files (or Dask's config) or a clear refusal, and a
real TLS LocalCluster on 127.0.0.1 running a cell as the local engine does."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from schedlab.errors import ConfigError
from schedlab.sweep import parse_sweep, run_sweep
from schedlab.sweep.run import Remote, deterministic

ONE_CELL = """\
[sweep]
name = "one"
baseline = "fifo"

[traces]
workloads = ["workload-1"]
max_jobs = 8

[grid]
policies = ["fifo"]
seeds = [0]
round_s = 600.0
"""

NO_DASK_TLS = {"distributed.comm.tls.ca-file": None, "distributed.comm.tls.client.cert": None}


@pytest.fixture
def dask_config():
    return pytest.importorskip("dask").config


def test_tls_needs_the_ca_and_a_client_certificate(dask_config):
    with dask_config.set(NO_DASK_TLS):
        for partial in (Remote("tls://10.0.0.5:8786"), Remote("tls://10.0.0.5:8786", tls_cert="c.pem", tls_key="k.pem"),
                        Remote("tls://10.0.0.5:8786", tls_ca_file="ca.pem")):
            with pytest.raises(ConfigError, match="tls:// needs the CA that signed the scheduler .*--tls-ca-file and "
                                                  "--tls-cert"):
                partial.check()
        Remote("tls://10.0.0.5:8786", tls_ca_file="ca.pem", tls_cert="both.pem").check()  # the key in the cert file
    with dask_config.set({"distributed.comm.tls.ca-file": "ca.pem", "distributed.comm.tls.client.cert": "c.pem"}):
        Remote("tls://10.0.0.5:8786").check()  # Dask's own TLS config


def test_tls_files_are_refused_for_a_tcp_address():
    with pytest.raises(ConfigError, match="are for a tls:// address; use tls://HOST:PORT"):
        Remote("tcp://127.0.0.1:8786", tls_ca_file="ca.pem", tls_cert="c.pem").check()


def test_all_of_127_0_0_0_8_and_ipv6_loopback_are_trusted_over_tcp():
    for address in ("tcp://127.0.0.2:8786", "tcp://[::1]:8786", "tcp://localhost:8786"):
        Remote(address).check()
    with pytest.raises(ConfigError, match="--insecure"):
        Remote("tcp://[2001:db8::1]:8786").check()


def test_the_cli_refuses_tls_without_the_files(tmp_path):
    config = tmp_path / "one.toml"
    config.write_text(ONE_CELL)
    out = subprocess.run([sys.executable, "-m", "schedlab.cli", "sweep", str(config), "--out", str(tmp_path / "o"),
                          "--engine", "dask", "--address", "tls://10.0.0.5:8786", "--quiet"],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "DASK_DISTRIBUTED__COMM__TLS__CA_FILE": "",
                              "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT": ""})
    assert out.returncode == 2 and "tls:// needs the CA" in out.stderr and "--tls-cert" in out.stderr
    assert not (tmp_path / "o" / "cells").exists()


def test_a_sweep_runs_on_a_tls_scheduler_as_it_runs_locally(tmp_path):
    pytest.importorskip("distributed", reason="a sweep on Dask needs the dask extra")
    pytest.importorskip("cryptography", reason="Dask's Security.temporary makes the cluster's certificate with it")
    from dask.distributed import LocalCluster
    from distributed.security import Security

    security = Security.temporary()  # a self-signed certificate, its own CA, for every role
    files = {}
    for name, pem in (("ca", security.tls_ca_file), ("cert", security.tls_client_cert), ("key", security.tls_client_key)):
        files[name] = tmp_path / f"{name}.pem"
        files[name].write_text(pem)
    sweep = parse_sweep(ONE_CELL)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, host="127.0.0.1", security=security,
                      dashboard_address=None, silence_logs=logging.ERROR) as cluster:
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        remote = Remote(cluster.scheduler_address, str(files["ca"]), str(files["cert"]), str(files["key"]))
        records, failed = run_sweep(sweep, tmp_path / "tls", "dask", address=remote, progress=False)
    local, _ = run_sweep(sweep, tmp_path / "local", "local", 1, progress=False)
    assert failed == [] and len(records) == 1
    assert [deterministic(r) for r in records] == [deterministic(r) for r in local]
