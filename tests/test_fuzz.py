"""Schemathesis over every operation: in-process from pytest, and its CLI against a live `specway serve`.

Both run every check, positive data acceptance included (tests/fuzz_support.py: a schema-valid request is accepted,
except the refusals by design it names and verifies). Both are bounded (examples per operation, request timeouts) so
CI stays fast; any failure is a real bug. The full size, by hand (about 3 minutes on two cores):

    SPECWAY_FUZZ_EXAMPLES=100 .venv/bin/python -m pytest tests/test_fuzz.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import hypothesis
import pytest
import schemathesis
from schemathesis.checks import CHECKS
from schemathesis.specs.openapi.checks import positive_data_acceptance

from tests import fuzz_support
from tests.conftest import Live, free_port, serve, spawn, stop

# Examples per operation: 40 in CI (the two tests take about a minute and a half), 100 for a full run by hand.
MAX_EXAMPLES = int(os.environ.get("SPECWAY_FUZZ_EXAMPLES", "40"))


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with serve(None, tmp_path_factory.mktemp("fuzz")) as g:
        yield g


def test_every_operation_conforms(gateway: Live) -> None:
    """Every operation, positive data (the CLI below also sends negative data), every check Schemathesis has."""
    assert fuzz_support.positive_data_acceptance_unless_by_design in CHECKS.get_all()
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
            # Importing tests.fuzz_support registered its check, which stands in for positive_data_acceptance.
            case.validate_response(response, headers=headers, excluded_checks=[positive_data_acceptance])

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
        # A real decision id lets the explain operation answer 200s too, not only 404s; the Gemini actions name the
        # placeholder model (the key's routing picks echo), so their bodies reach an upstream, not only a 404.
        (tmp_path / "schemathesis.toml").write_text(f'[parameters]\n"path.decisionId" = "{decision}"\n'
                                                    '"path.model" = "specway"\n')
        run = subprocess.run(
            [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(tmp_path / "schemathesis.toml"),
             "run", f"{base}/openapi.json", "-H", f"Authorization: Bearer {key}",
             # Naming the hooks' check makes the CLI refuse to run unless the hooks file loaded. It stands in for
             # positive_data_acceptance. use_after_free expects a 404 after DELETE; DELETE on a key or workspace
             # revokes it, and the revoked object stays readable with its revoked_at, spend and history, by design.
             "--checks", f"all,{fuzz_support.positive_data_acceptance_unless_by_design.__name__}",
             "--exclude-checks", "positive_data_acceptance,use_after_free",
             "--max-examples", str(MAX_EXAMPLES), "--request-timeout", "10", "--generation-database", "none",
             # How fast Hypothesis generates the Gemini bodies depends on the machine's load, not on the API.
             "--suppress-health-check", "too_slow", "--no-color"],
            capture_output=True, text=True, timeout=600, check=False,
            env={**os.environ, "SCHEMATHESIS_HOOKS": fuzz_support.__file__},
        )
        log = (tmp_path / "serve.log").read_text()
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:] + "\nserver log:\n" + log[-4000:]
        assert "Traceback" not in (tmp_path / "serve.log").read_text()
    finally:
        stop(proc)


def _refusal(code: str, message: str, param: str | None) -> SimpleNamespace:
    error = {"type": "invalid_request_error", "code": code, "message": message, "param": param}
    return SimpleNamespace(status_code=400, content=json.dumps({"type": "error", "error": error}).encode())


def _upstream_cannot(field: str) -> str:
    return f"{field} cannot reach this model: its echo upstream has no way to take it."


@pytest.mark.parametrize(("path", "body", "refusal", "excused"), [
    ("/v1/chat/completions", {"store": True}, _refusal("unsupported_parameter", _upstream_cannot("store"), "store"),
     True),
    ("/v1/responses", {"text": {"format": {}}},
     _refusal("unsupported_parameter", _upstream_cannot("text.format"), "text.format"), True),
    # A refusal of a field the request did not send, or null, is a bug.
    ("/v1/chat/completions", {"store": True}, _refusal("unsupported_parameter", _upstream_cannot("audio"), "audio"),
     False),
    ("/v1/chat/completions", {"audio": None}, _refusal("unsupported_parameter", _upstream_cannot("audio"), "audio"),
     False),
    # The same code for what no upstream changes (the spec refuses it too): not configuration.
    ("/v1/responses", {"previous_response_id": "r"},
     _refusal("unsupported_parameter", "previous_response_id is not supported: no state.", "previous_response_id"),
     False),
    ("/v1/embeddings", {"model": "specway/echo"}, _refusal(
        "unsupported_model", "The model 'specway/echo' cannot make embeddings: it is served by upstream 'echo'.",
        "model"), True),
    ("/v1/embeddings", {"model": "other"}, _refusal(
        "unsupported_model", "The model 'specway/echo' cannot make embeddings: it is served by upstream 'echo'.",
        "model"), False),
    ("/v1/chat/completions", {"model": "specway/echo"}, _refusal(
        "unsupported_model", "The model 'specway/echo' cannot make embeddings: it is served by upstream 'echo'.",
        "model"), False),
    ("/v1/messages", {"metadata": {"a.b": [1, 2**64]}},
     _refusal("number_out_of_range", "out of range", "metadata.a.b.1"), True),
    ("/v1/messages", {"metadata": {"a": -(2**63) - 1}}, _refusal("number_out_of_range", "out of range", "metadata.a"),
     True),
    ("/v1/messages", {"metadata": {"a": 2**64 - 1}}, _refusal("number_out_of_range", "out of range", "metadata.a"),
     False),
    ("/v1/messages", {"metadata": {"a": 2**64}}, _refusal("number_out_of_range", "out of range", "metadata.b"),
     False),
    ("/v1/messages", {"messages": []}, _refusal("invalid_request", "messages.0.content: bad", "messages.0.content"),
     False),
])
def test_only_refusals_by_design_are_excused(path: str, body: dict[str, Any], refusal: SimpleNamespace,
                                             excused: bool) -> None:
    schema = schemathesis.openapi.from_path(Path(__file__).parents[1] / "openapi.json")
    case = schema[path]["POST"].Case(body=body)
    assert fuzz_support.refused_by_design(case, refusal) is excused
    assert not fuzz_support.refused_by_design(case, SimpleNamespace(status_code=422, content=refusal.content))
