"""Schemathesis over every operation: in-process from pytest, and its CLI against a live `specway serve`.

Both are bounded (examples per operation, request timeouts) so CI stays fast; any failure is a real bug.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests.conftest import Live, free_port, serve, spawn, stop

MAX_EXAMPLES = int(os.environ.get("SPECWAY_FUZZ_EXAMPLES", "40"))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with serve(None, tmp_path_factory.mktemp("fuzz")) as g:
        yield g


# Schema-valid requests refused on purpose, each naming its field: what the routed upstream cannot carry (which
# upstream serves a request is the key's routing, not the spec's to say), a model that cannot serve the operation
# (an embeddings request to a chat model), and numbers no upstream encoder can write as sent (JSON lets a server
# limit the range of numbers it accepts: RFC 8259, section 6).
_REFUSED_BY_DESIGN = frozenset({"unsupported_parameter", "unsupported_model", "number_out_of_range"})


def _excluded(response: Any) -> list[Any]:
    if response.status_code == 400 and response.json().get("error", {}).get("code") in _REFUSED_BY_DESIGN:
        return [positive_data_acceptance]
    return []


def test_every_operation_conforms(gateway: Live) -> None:
    """Every operation, positive and negative data, every check Schemathesis has."""
    schema = schemathesis.openapi.from_url(f"{gateway.url}/openapi.json")
    headers = {"Authorization": f"Bearer {gateway.key}"}
    tested = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @hypothesis.given(case=operation.as_strategy())
        @hypothesis.settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
                             suppress_health_check=list(hypothesis.HealthCheck), phases=[hypothesis.Phase.generate])
        def check(case: schemathesis.Case) -> None:
            response = case.call(headers=headers, timeout=10)
            case.validate_response(response, headers=headers, excluded_checks=_excluded(response))

        check()
        tested.append(operation.label)
    spec = httpx.get(f"{gateway.url}/openapi.json").json()
    assert len(tested) == sum(len(item) for item in spec["paths"].values()), tested


def test_schemathesis_cli_against_live_serve(tmp_path: Path) -> None:
    config = tmp_path / "specway.yaml"
    config.write_text(f"store:\n  url: sqlite:///{tmp_path / 'specway.db'}\n")
    port = free_port()
    proc, key = spawn(config, port, tmp_path / "serve.log")
    base = f"http://127.0.0.1:{port}"
    try:
        assert key.startswith("sk-sw-")
        r = httpx.post(f"{base}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                       json={"messages": [{"role": "user", "content": "hi"}]})
        decision = r.headers["x-specway-decision-id"]
        # A real decision id lets the explain operation answer 200s too, not only 404s.
        (tmp_path / "schemathesis.toml").write_text(f'[parameters]\n"path.decisionId" = "{decision}"\n')
        run = subprocess.run(
            [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(tmp_path / "schemathesis.toml"),
             "run", f"{base}/openapi.json", "-H", f"Authorization: Bearer {key}", "--checks", "all",
             # The in-process test above runs positive_data_acceptance, less the refusals of what the routed upstream
             # cannot carry. use_after_free expects a 404 after DELETE; DELETE on a key or workspace revokes it, and
             # the revoked object stays readable with its revoked_at, spend and history, by design.
             "--exclude-checks", "positive_data_acceptance,use_after_free",
             "--max-examples", str(MAX_EXAMPLES), "--request-timeout", "10", "--generation-database", "none",
             "--no-color"],
            capture_output=True, text=True, timeout=600, check=False,
        )
        log = (tmp_path / "serve.log").read_text()
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:] + "\nserver log:\n" + log[-4000:]
        assert "Traceback" not in (tmp_path / "serve.log").read_text()
    finally:
        stop(proc)
