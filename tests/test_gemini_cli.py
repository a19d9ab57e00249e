"""Gemini CLI through the gateway (the npm version pinned in tests/gemini_cli/package-lock.json), run headless
(`gemini -p`) with the README's environment (GOOGLE_GEMINI_BASE_URL, GEMINI_API_KEY, a gateway model id) against a
`specway serve` whose model lives on an anthropic upstream, played by the scripted model of tests/agent_provider.py:
the model has it run its shell tool, then quotes the tool's result. Its home is new and empty (telemetry and
updates off), and every other host is behind tests/test_coding_agents.py's Trap, which the test checks."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_provider import QUOTE, AgentProvider, Task
from tests.fake_upstream import GEMINI_KEY, FakeUpstream
from tests.test_coding_agents import Gateway, agents_gateway, base_env, npm_installed, request_lines, run

CLI_DIR = Path(__file__).parent / "gemini_cli"
KINDS = ("anthropic", "gemini")  # Claude through the Messages API; a Gemini model through the Gemini API itself
MODEL = {kind: f"acme/on-{kind}" for kind in KINDS}
UPSTREAM_PATHS = {"anthropic": {"/v1/messages"}, "gemini": {"/v1beta/models/gemini-coder:streamGenerateContent"}}
# Gemini CLI is told not to report usage, not to look for updates, and not to ask whether the folder is trusted;
# the key is a Gemini API key to it (GOOGLE_GEMINI_BASE_URL then sends every request to the gateway).
SETTINGS = {"privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
            "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}}}


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/gemini_cli installed: the `gemini` command."""
    return npm_installed(CLI_DIR, tmp_path_factory.mktemp("gemini_cli"), {"gemini": "@google/gemini-cli"}) / "gemini"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture(scope="module")
def gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    upstreams = {"anthropic": {"kind": "anthropic", "base_url": fake.anthropic_url},
                 "gemini": {"kind": "gemini", "base_url": fake.google_url, "api_key_env": "SPECWAY_CLI_GEMINI"}}
    models = [{"id": MODEL[kind], "upstream": kind, "name": f"{kind}-coder", "context_window": 200000,
               "price": {"input": 0, "output": 0}} for kind in KINDS]
    with agents_gateway(tmp_path_factory.mktemp("gateway"), upstreams, models,
                        lambda mp: mp.setenv("SPECWAY_CLI_GEMINI", GEMINI_KEY)) as gw:
        yield gw


@pytest.mark.parametrize("kind", KINDS)
def test_gemini_cli_runs_its_shell_tool_through_the_gateway(cli: Path, fake: FakeUpstream, gateway: Gateway,
                                                            tmp_path: Path, kind: str) -> None:
    token = f"specway-{secrets.token_hex(6)}"
    workdir = tmp_path / "work"
    workdir.mkdir()
    home = tmp_path / "home"
    (home / ".gemini").mkdir(parents=True)
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    fake.reset()
    provider = AgentProvider(Task.shell(f"echo {token}"), workdir, marker=token)
    fake.responder = provider
    start = gateway.log.stat().st_size
    env = base_env(home) | gateway.trap.env() | {"GOOGLE_GEMINI_BASE_URL": gateway.url, "GEMINI_API_KEY": gateway.key,
                                                 "TERM": "dumb"}
    prompt = f"Run the shell command `echo {token}` and tell me what it printed."
    proc = run([str(cli), "-p", prompt, "-m", MODEL[kind], "--yolo", "--output-format", "json"], workdir, env)
    assert proc.returncode == 0, f"gemini exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    answer = json.loads(proc.stdout)["response"]

    assert [name for name, _ in provider.calls] == ["run_shell_command"], provider.calls
    assert len(provider.results) == 1 and token in provider.results[0], provider.results
    assert QUOTE in answer and token in answer, answer
    assert {r.path for r in fake.requests} == UPSTREAM_PATHS[kind]
    lines = request_lines(gateway.log, start)
    assert {line["route"] for line in lines} == {"/v1beta/models/{model}:streamGenerateContent"}, lines
    assert [line for line in lines if not 200 <= int(line["status"]) < 300] == [], lines  # type: ignore[call-overload]
    assert gateway.trap.asked == [], "Gemini CLI reached for another host than the gateway"
