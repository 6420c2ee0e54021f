"""Fixtures of the end-to-end tests: the servers run.sh started, once they are ready.

run.sh passes their addresses in the environment:

  E2E_SIM_URL            one inferrail-sim on its own
  E2E_GATEWAY_URL        inferrail-gateway's client port, in front of the three below
  E2E_GATEWAY_ADMIN_URL  its admin port (/admin/replicas)
  E2E_REPLICAS           sim-1=http://127.0.0.1:port,... the gateway's engines by replica id
  E2E_STRESS_OUT         directory for the stress result file; empty: print only
  E2E_BIN_DIR            the binaries run.sh built, for tests that start servers of their own
                         (test_kv_events.py)

A test taking `target` runs twice: straight to the lone simulator ("sim"), and through the
gateway ("gateway"), where it asks for the alias `sim` of inferrail/sim-8b.
"""

import json
import os
import time

import pytest

from fleet import ALIAS, MODEL, Target, http_get


def _env(name):
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run the suite with tests/e2e/run.sh", returncode=2)
    return value


def _wait(what, ready, timeout=15.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except (OSError, ValueError, KeyError) as err:  # not listening yet, or a partial answer
            last = err
        time.sleep(0.05)
    pytest.exit(f"{what} was not ready within {timeout:.0f} s (last error: {last})", returncode=3)


def _healthy(url):
    return http_get(url + "/health")[0] == 200


def _gateway_ready(url, admin, n):
    """Every replica healthy with a fresh engine report, and the engines' model cards known."""
    reps = json.loads(http_get(admin + "/admin/replicas")[1])["replicas"]
    if len(reps) != n or not all(r["healthy"] and r["engine"] and r["engine"]["fresh"] for r in reps):
        return False
    models = json.loads(http_get(url + "/v1/models")[1])["data"]
    return all(m.get("max_model_len") for m in models)


@pytest.fixture(scope="session")
def replicas():
    """The gateway's engines, replica id -> base URL, once each answers /health."""
    reps = {}
    for item in _env("E2E_REPLICAS").split(","):
        rid, _, url = item.partition("=")
        reps[rid] = url
    for rid, url in reps.items():
        _wait(f"simulator {rid} ({url})", lambda u=url: _healthy(u))
    return reps


@pytest.fixture(scope="session")
def gateway(replicas):
    url, admin = _env("E2E_GATEWAY_URL"), _env("E2E_GATEWAY_ADMIN_URL")
    _wait(f"gateway ({url})", lambda: _gateway_ready(url, admin, len(replicas)))
    return Target("gateway", url, ALIAS, dict(replicas))


@pytest.fixture(scope="session")
def solo_sim():
    url = _env("E2E_SIM_URL")
    _wait(f"simulator ({url})", lambda: _healthy(url))
    return Target("sim", url, MODEL, {"sim": url})


@pytest.fixture(params=["sim", "gateway"])
def target(request):
    return request.getfixturevalue("solo_sim" if request.param == "sim" else "gateway")
