"""Where the configuration comes from: a named file, $SPECWAY_CONFIG, ./specway.yaml, then SPECWAY_ variables over
it; and the configuration reference names every variable (issue 12)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from generator.docs import env_prefixes
from handlers import config as config_mod
from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]


def test_the_environment_sets_any_key_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump({"server": {"port": 1234, "host": "0.0.0.0"},
                                    "upstreams": {"up": {"kind": "openai", "base_url": "http://a"}},
                                    "models": [{"id": "m", "upstream": "up", "name": "m"}]}))
    env = {
        "SPECWAY_SERVER__PORT": "9000",  # read as YAML: a number
        "SPECWAY_UPSTREAMS__UP__BASE_URL": "http://b",
        "SPECWAY_UPSTREAMS__UP__TIMEOUTS__READ": "7.5",  # a section the file left out
        "SPECWAY_LEDGER__FLUSH_SECONDS": "2",
        "SPECWAY_DEFAULT_POLICY": "default",
        "SPECWAY_TEST_PG_URL": "postgresql://elsewhere",  # not a configuration key: not ours to read
    }
    cfg = config_mod.load(path, env)
    assert (cfg.server.port, cfg.server.host) == (9000, "0.0.0.0")
    assert cfg.upstreams["up"].base_url == "http://b" and float(cfg.upstreams["up"].timeouts.read) == 7.5
    assert float(cfg.ledger.flush_seconds) == 2


@pytest.mark.parametrize(("name", "value", "message"), [
    ("SPECWAY_SERVER__PROT", "9000", r"server\.prot: Extra inputs are not permitted"),
    ("SPECWAY_SERVER__PORT", "ninety", r"server\.port"),
    ("SPECWAY_SERVER__PORT__X", "1", r"server\.port"),
    ("SPECWAY_LEDGER__FLUSH_SECONDS", "[1", r"SPECWAY_LEDGER__FLUSH_SECONDS: not a valid YAML value"),
])
def test_a_wrong_variable_fails_at_startup_naming_it(name: str, value: str, message: str) -> None:
    with pytest.raises(config_mod.ConfigError, match=message) as caught:
        config_mod.load(None, {name: value})
    assert name in str(caught.value) or "SPECWAY_" in str(caught.value)


def test_specway_yaml_in_the_working_folder_is_read_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    monkeypatch.chdir(tmp_path)
    assert config_mod.load(None, {}).server.port != 7777
    (tmp_path / "specway.yaml").write_text("server:\n  port: 7777\n")
    assert config_mod.load(None, {}).server.port == 7777
    other = tmp_path / "other.yaml"
    other.write_text("server:\n  port: 7778\n")
    assert config_mod.load(None, {"SPECWAY_CONFIG": str(other)}).server.port == 7778  # a named file wins


def test_specway_serve_listens_where_the_environment_says(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "SPECWAY_SERVER__PORT": str(port),
           "SPECWAY_STORE__URL": f"sqlite:///{tmp_path / 'env.db'}"}
    env.pop("SPECWAY_CONFIG", None)
    proc = subprocess.Popen([sys.executable, "-m", "handlers.cli", "serve"], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
                break
            except httpx.HTTPError:
                assert proc.poll() is None, "specway serve exited"
                time.sleep(0.1)
        else:
            raise AssertionError("specway serve never listened on the port from the environment")
        assert (tmp_path / "env.db").exists()
    finally:
        proc.terminate()
        proc.wait(30)


def test_the_reference_names_a_variable_for_every_reachable_key() -> None:
    schema = yaml.safe_load((ROOT / "specs" / "config.schema.yaml").read_text())
    prefixes = env_prefixes(schema)
    assert prefixes["Server"] == "SPECWAY_SERVER"
    assert prefixes["TimeoutSettings"] == "SPECWAY_UPSTREAMS__<NAME>__TIMEOUTS"
    assert "ModelSettings" not in prefixes  # list entries: the list is set whole
    reference = (ROOT / "docs" / "configuration.md").read_text()
    for key in schema["definitions"]["Server"]["properties"]:
        assert f"`SPECWAY_SERVER__{key.upper()}`" in reference


def test_a_variable_below_a_value_the_file_set_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("server:\n  port: 8080\n")
    with pytest.raises(config_mod.ConfigError, match=r"SPECWAY_SERVER__PORT__X: server\.port is not a section"):
        config_mod.load(path, {"SPECWAY_SERVER__PORT__X": "1"})
