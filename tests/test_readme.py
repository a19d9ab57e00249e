"""The README's quickstart, run as written (issue 12): its marked blocks (`<!-- readme-test: NAME -->`) are executed
with bash and python against a `specway serve` started the way `make run` starts it, in a folder of its own.

What is changed, and only that: the port (127.0.0.1:8080 becomes a free one, through SPECWAY_SERVER__PORT, the
documented override), the placeholder key `sk-sw-...` becomes the key the gateway printed, and the real providers'
base URLs point at a local server of the same kind (SPECWAY_UPSTREAMS__<NAME>__BASE_URL).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from handlers import config as config_mod
from handlers.inference.catalog import Catalog
from handlers.inference.upstreams.registry import build_upstream
from tests import fake_gemini
from tests.conftest import free_port
from tests.fake_upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[1]
_BLOCK = re.compile(r"<!-- readme-test: (\w+) -->\n```\w+\n(.*?)```", re.DOTALL)


def blocks() -> dict[str, str]:
    return dict(_BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8")))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A project folder: the venv where the README expects it (.venv), nothing else."""
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)
    return tmp_path


@contextmanager
def serving(folder: Path, env: dict[str, str]) -> Iterator[str]:
    """`make run`'s command in `folder`; yields the key it printed (empty on a used store)."""
    proc = subprocess.Popen([str(folder / ".venv" / "bin" / "specway"), "serve"], cwd=folder, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        url = f"http://127.0.0.1:{env['SPECWAY_SERVER__PORT']}/healthz"
        for _ in range(300):
            try:
                httpx.get(url, timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, "specway serve exited"
                time.sleep(0.1)
        key = ""
        if proc.stdout is not None and not env.get("_USED"):
            key = proc.stdout.readline().strip()
        yield key
    finally:
        proc.terminate()
        proc.wait(30)


def run(block: str, folder: Path, env: dict[str, str], key: str, *, python: bool = False) -> str:
    """Run a block; a shell block's exports are kept in `env`, as in the terminal the README is followed in."""
    text = block.replace("127.0.0.1:8080", f"127.0.0.1:{env['SPECWAY_SERVER__PORT']}").replace("sk-sw-...", key)
    exported = folder / "exported.env"
    args = ([sys.executable, "-c", text] if python else
            ["bash", "-euo", "pipefail", "-c", f'{text}\nenv -0 > "{exported}"'])
    done = subprocess.run(args, cwd=folder, env={**env, "RELAY_KEY": key}, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    if not python:
        pairs = (item.partition("=") for item in exported.read_text().split("\0") if "=" in item)
        env.update({name: value for name, _, value in pairs if name not in ("RELAY_KEY", "PWD", "SHLVL", "_")})
    return done.stdout


def test_the_quickstart_runs_as_written(folder: Path) -> None:
    found = blocks()
    assert set(found) == {"curl", "sdk", "config", "credit", "azure", "bedrock", "google"}  # see the tests below
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECWAY_")}
    env["SPECWAY_SERVER__PORT"] = str(free_port())
    with serving(folder, env) as key:
        assert key.startswith("sk-sw-")
        out = run(found["curl"], folder, env, key)
        assert '"object":"chat.completion"' in out and '"type":"message"' in out and "response.completed" in out
        assert '"type":"error"' not in out
        printed = run(found["sdk"], folder, env, key, python=True).splitlines()
        assert len(printed) == 2 and all(printed)

    # Real providers: the README's config in specway.yaml, its providers replaced by local servers of their kinds.
    (folder / "specway.yaml").write_text(found["config"])
    with FakeUpstream() as fake:
        env |= {"SPECWAY_UPSTREAMS__OPENAI__BASE_URL": fake.url,
                "SPECWAY_UPSTREAMS__ANTHROPIC__BASE_URL": fake.anthropic_url, "_USED": "1"}
        run(found["credit"], folder, env, key)  # step 2: the providers' keys exported, the workspace credited
        assert env["OPENAI_API_KEY"] and env["ANTHROPIC_API_KEY"]
        with serving(folder, env):  # step 3
            headers = {"Authorization": f"Bearer {key}"}
            chat = f"http://127.0.0.1:{env['SPECWAY_SERVER__PORT']}/v1/chat/completions"
            fast = httpx.post(chat, headers=headers, json={"messages": [{"role": "user", "content": "hi"}]})
            strong = httpx.post(chat, headers=headers, json={"messages": [{"role": "user", "content": "hi"}],
                                                             "reasoning_effort": "high"})
            assert (fast.status_code, strong.status_code) == (200, 200), fast.text + strong.text
            assert (fast.headers["x-specway-model"], strong.headers["x-specway-model"]) == ("fast", "strong")
            used = httpx.get(f"http://127.0.0.1:{env['SPECWAY_SERVER__PORT']}/v1/usage", headers=headers).json()
            assert used["totals"]["requests"] >= 2 and float(used["totals"]["cost"]) > 0
    # Azure OpenAI: the README's block as specway.yaml, the resource a local server that checks Azure's api-key.
    (folder / "specway.yaml").write_text(found["azure"])
    with FakeUpstream() as fake:
        fake.azure_keys = {"azure-readme-key"}
        env = {k: v for k, v in env.items() if not k.startswith("SPECWAY_UPSTREAMS__")}  # no openai, anthropic here
        env |= {"SPECWAY_UPSTREAMS__AZURE__BASE_URL": fake.azure_url, "AZURE_OPENAI_API_KEY": "azure-readme-key"}
        with serving(folder, env):
            chat = f"http://127.0.0.1:{env['SPECWAY_SERVER__PORT']}/v1/chat/completions"
            answer = httpx.post(chat, headers={"Authorization": f"Bearer {key}"},
                                json={"messages": [{"role": "user", "content": "hi"}]})
            assert (answer.status_code, answer.headers.get("x-specway-model")) == (200, "azure-fast"), answer.text
        sent = fake.requests[-1]
        assert (sent.path, sent.headers["api-key"], sent.body["model"]) == \
            ("/openai/v1/chat/completions", "azure-readme-key", "my-gpt-4o-mini")
    listed = subprocess.run([str(folder / ".venv/bin/specway"), "workspaces", "list"], cwd=folder, env=env,
                            capture_output=True, text=True, timeout=60, check=True)
    assert float(json.loads(listed.stdout)[0]["credit"]) < 10


def test_the_bedrock_block_is_a_configuration_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Running it needs AWS; what can be checked without is that it is valid and builds its upstream (its
    credentials are only looked for at the first request)."""
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    parsed = config_mod.parse(yaml.safe_load(blocks()["bedrock"]), "README.md")
    upstream = build_upstream("bedrock", parsed.upstreams["bedrock"])
    assert upstream.kind == "bedrock"
    model = Catalog.from_config(parsed).resolve("claude-bedrock")  # priced and described by the known-model data
    assert model is not None and model.reasoning and model.price_in > 0 and model.context_window
    assert upstream.path_for(parsed.models[0].name, True).endswith("-v1:0/converse-stream")


def test_the_google_block_is_a_configuration_as_written(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Running it needs Google's services; what can be checked without is that it is valid, builds its upstreams
    (the service-account file is read at startup, the token fetched at the first request) and that each model is
    priced and described by the known-model data, Claude on Vertex AI by Anthropic's prices."""
    account = fake_gemini.ServiceAccount.new()
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-readme-test")
    monkeypatch.setenv("VERTEX_SERVICE_ACCOUNT", str(account.key_file(tmp_path, "https://oauth2.googleapis.com/token")))
    parsed = config_mod.parse(yaml.safe_load(blocks()["google"]), "README.md")
    assert build_upstream("gemini", parsed.upstreams["gemini"]).kind == "gemini"
    vertex = build_upstream("vertex", parsed.upstreams["vertex"])
    assert vertex.path_for("claude-sonnet-4-5@20250929", True).endswith(
        "/projects/my-project/locations/us-east5/publishers/anthropic/models/claude-sonnet-4-5@20250929:streamRawPredict")
    catalog = Catalog.from_config(parsed)
    for model_id in ("gemini-flash", "gemini-pro-vertex", "claude-vertex"):
        model = catalog.resolve(model_id)
        assert model is not None and model.reasoning and model.price_in > 0 and model.context_window, model_id
