"""The generator: deterministic, checks drift, and names the culprit when the spec and handlers disagree."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generated import models
from generator import __main__ as gen
from generator.spec import SpecError

ROOT = Path(__file__).resolve().parent.parent


def _copy_tree(tmp: Path) -> Path:
    for part in ("specs", "handlers/endpoints", "handlers/inference/upstreams"):
        shutil.copytree(ROOT / part, tmp / part, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp


def _add_operation(root: Path, path: str, op: dict) -> None:
    f = root / "specs" / "paths" / "extra.yaml"
    f.write_text(yaml.safe_dump({path: {"post": op}}))


def test_committed_files_match_specs() -> None:
    files = gen.render()
    stale = [str(p.relative_to(ROOT)) for p, text in files.items() if p.read_text(encoding="utf-8") != text]
    assert stale == [], "run `python -m generator`"


def test_output_is_deterministic() -> None:
    assert gen.render() == gen.render()


def test_output_is_the_same_in_other_processes_whatever_their_hash_seed() -> None:
    """Set order and dict order built from sets change with PYTHONHASHSEED, between processes only: render in two
    fresh interpreters with different seeds and compare with this process's output."""
    script = ("import hashlib, sys; from generator import __main__ as gen; "
              "[print(p, hashlib.sha256(t.encode()).hexdigest()) for p, t in sorted(gen.render().items())]")
    here = "".join(f"{p} {hashlib.sha256(t.encode()).hexdigest()}\n" for p, t in sorted(gen.render().items()))
    for seed in ("1", "4242"):
        run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=False)
        assert run.returncode == 0, run.stderr
        assert run.stdout == here, f"PYTHONHASHSEED={seed} rendered differently"


def test_check_fails_with_a_diff_on_a_stale_tree(tmp_path: Path) -> None:
    """README: `python -m generator --check` "fails with a diff when anything is stale"."""
    for part in ("specs", "generated", "generator", "handlers"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("openapi.json", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "docs").mkdir()
    for doc in ("configuration.md", "api.md"):
        shutil.copy(ROOT / "docs" / doc, tmp_path / "docs" / doc)
    clean = subprocess.run([sys.executable, "-m", "generator", "--check"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, check=False)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    models_py = tmp_path / "generated" / "models.py"
    models_py.write_text(models_py.read_text().replace("class ChatCompletion(", "class ChatCompletionStale(", 1))
    stale = subprocess.run([sys.executable, "-m", "generator", "--check"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120, check=False)
    out = stale.stdout + stale.stderr
    assert stale.returncode != 0, out
    assert "generated/models.py" in out and "-class ChatCompletionStale(" in out and "+class ChatCompletion(" in out


def test_check_passes_on_a_clean_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert gen.main(["--check"]) == 0


def test_operation_without_handler_fails_naming_it(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    _add_operation(root, "/v1/things", {"operationId": "create_thing", "x-handler": "inference",
                                        "responses": {"200": {"description": "ok"}}})
    with pytest.raises(SpecError) as info:
        gen.render(root)
    assert "handlers/endpoints/inference.py: has no function create_thing" in str(info.value)


def test_handler_without_operation_fails_naming_it(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    with (root / "handlers/endpoints/discovery.py").open("a") as f:
        f.write("\n\nasync def orphan(principal):\n    return None\n")
    with pytest.raises(SpecError) as info:
        gen.render(root)
    assert "function orphan serves no operation" in str(info.value)


def test_duplicate_operation_id_fails(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    _add_operation(root, "/v1/again", {"operationId": "create_message", "x-handler": "inference",
                                       "responses": {"200": {"description": "ok"}}})
    with pytest.raises(SpecError) as info:
        gen.render(root)
    assert "operationId 'create_message' is already used" in str(info.value)


def test_schema_edit_changes_only_models_and_bundle(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    before = {p.relative_to(root): t for p, t in gen.render(root).items()}
    chat = root / "specs/schemas/chat.yaml"
    doc = yaml.safe_load(chat.read_text())
    doc["ChatCompletionRequest"]["properties"]["user"] = {"type": "string", "description": "An end-user id.",
                                                           "x-translate": "advisory"}
    chat.write_text(yaml.safe_dump(doc, sort_keys=False))
    after = {p.relative_to(root): t for p, t in gen.render(root).items()}
    changed = sorted(str(p) for p in before if before[p] != after[p])
    assert changed == ["docs/api.md", "generated/models.py", "generated/openapi.json", "generated/openapi_checked.py",
                       "openapi.json"]
    assert 'user: StrictStr = Field(None, json_schema_extra={"x-translate": "advisory"})' in after[
        Path("generated/models.py")]


def test_a_request_field_without_its_translation_rule_fails_naming_it(tmp_path: Path) -> None:
    """A field added to a format's request must say how it travels to another format: no hand-kept list in the code
    can forget it (it would be dropped silently for other kinds)."""
    root = _copy_tree(tmp_path)
    messages = root / "specs/schemas/messages.yaml"
    doc = yaml.safe_load(messages.read_text())
    doc["MessagesRequest"]["properties"]["brand_new"] = {"type": "string"}
    messages.write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(SpecError) as info:
        gen.render(root)
    assert "#/components/schemas/MessagesRequest/properties/brand_new: needs x-translate" in str(info.value)


def test_an_upstream_kind_without_its_class_fails_naming_it(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    config = root / "specs/config.schema.yaml"
    text = config.read_text()
    assert "enum: [openai, " in text
    config.write_text(text.replace("enum: [openai, ", "enum: [carrier_pigeon, openai, "))
    with pytest.raises(SpecError) as info:
        gen.render(root)
    assert "upstream kind 'carrier_pigeon' has no class in handlers/inference/upstreams/registry.py" in str(info.value)


def test_bad_yaml_names_the_file(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    (root / "specs/schemas/broken.yaml").write_text("A: [unclosed\n")
    with pytest.raises(SpecError) as info:
        gen.render(root)
    assert "broken.yaml: not valid YAML" in str(info.value)


def _bundle() -> dict:
    return json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))


def test_the_scope_list_is_the_spec_enum() -> None:
    from generated import scopes
    from handlers.store.base import SCOPES

    schemas = _bundle()["components"]["schemas"]
    assert scopes.SCOPES == SCOPES == tuple(schemas["Scope"]["enum"])
    assert scopes.DEFAULT_SCOPES == tuple(schemas["KeyCreate"]["properties"]["scopes"]["default"])
    assert [s.root for s in models.KeyCreate(name="x").scopes] == list(scopes.DEFAULT_SCOPES)


def test_an_unknown_scope_in_the_spec_fails_naming_it(tmp_path: Path) -> None:
    root = _copy_tree(tmp_path)
    inference = root / "specs/paths/inference.yaml"
    inference.write_text(inference.read_text().replace("x-scope: inference", "x-scope: root", 1))
    admin = root / "specs/schemas/admin.yaml"
    admin.write_text(admin.read_text().replace("default: [inference,", "default: [everything,", 1))
    with pytest.raises(SpecError) as info:
        gen.render(root)
    assert "x-scope 'root' is not a Scope" in str(info.value)
    assert "default 'everything' is not a Scope" in str(info.value)


def _example(template: str) -> str:
    return re.sub(r"\{[^}]+\}", "x1", template)


def test_the_paths_table_matches_every_path_of_the_spec() -> None:
    from generated.paths import TABLE
    from handlers.edge import paths

    spec_paths = _bundle()["paths"]
    assert [info.template for info in TABLE] == list(spec_paths)
    for template, item in spec_paths.items():
        methods = sorted(m.upper() for m in item if m in ("get", "put", "post", "delete", "patch"))
        info = paths.match(_example(template), methods[0])  # a path and a method: one spec path
        assert info is not None and info.template == template
        assert info.methods == ", ".join(methods)
    slashed = paths.match("/v1/models/acme/fast")  # a model id may hold a slash (format: path)
    assert slashed is not None and slashed.template == "/v1/models/{modelId}"
    # Gemini's actions share OpenAI's /v1/models/ prefix: the method tells them apart, as the router does
    action = paths.match("/v1/models/acme/fast:countTokens", "POST")
    assert action is not None and action.template == "/v1/models/{model}:countTokens" and action.errors == "google"
    model = paths.match("/v1/models/acme/fast:countTokens", "GET")
    assert model is not None and model.template == "/v1/models/{modelId}" and model.errors == "specway"
    assert paths.match("/v1/keys/a/b") is None and paths.match("/nowhere") is None


def test_config_sections_default_to_instances() -> None:
    from generated import config

    cfg = config.Config()
    for name, cls in (("server", config.Server), ("store", config.StoreSettings),
                      ("cooldown", config.CooldownSettings), ("limits", config.LimitsSettings),
                      ("decisions", config.DecisionSettings)):
        assert isinstance(getattr(cfg, name), cls), name
    assert (cfg.upstreams, cfg.models, cfg.policies, cfg.default_policy) == ({}, [], {}, "default")
    assert cfg.server is not config.Config().server
    model = config.ModelSettings(id="a", upstream="u", name="n")
    assert isinstance(model.price, config.PriceSettings) and model.aliases == []
    assert isinstance(config.UpstreamSettings(kind="echo").timeouts, config.TimeoutSettings)
    assert isinstance(config.PolicySettings().thinking_budget, config.ThinkingBudget)


def test_a_config_key_with_no_value_is_its_default() -> None:
    from handlers import config as config_mod

    cfg = config_mod.parse(yaml.safe_load("server:\nupstreams:\n  e:\n    kind: echo\n    timeouts:\n"), "test")
    assert cfg.server.port == 8080 and cfg.upstreams["e"].timeouts.total == 300
    with pytest.raises(config_mod.ConfigError, match="upstreams.e: Input should be a valid dictionary"):
        config_mod.parse({"upstreams": {"e": None}}, "test")


def test_the_api_reference_shows_every_operation_and_schema() -> None:
    doc = json.loads((ROOT / "openapi.json").read_text())
    reference = (ROOT / "docs" / "api.md").read_text()
    for path, item in doc["paths"].items():
        for method in item:
            if method in ("get", "post", "put", "patch", "delete"):
                assert f"### `{method.upper()} {path}`" in reference
    for name in doc["components"]["schemas"]:
        assert f"### {name}\n" in reference


def test_every_operation_declares_what_the_connection_layer_may_answer() -> None:
    """408 and 431 (header and body limits) and 503 (`overloaded`, the worker's connection cap) can answer any
    operation: each one declares them (issue 11: every status we return is in the spec)."""
    doc = json.loads((ROOT / "openapi.json").read_text())
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in ("get", "post", "put", "patch", "delete"):
                assert {"408", "431", "503"} <= set(op["responses"]), (method, path)
