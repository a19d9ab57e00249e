"""The real coding agents through the gateway: Claude Code (speaking Messages) and Codex (speaking Responses), the
npm versions pinned in tests/agents/package-lock.json, run headless against a `specway serve` whose models live on
each upstream kind, all pointed at a scripted model (tests/agent_provider.py) that has the agent run its shell tool
or its file-edit tool and then quotes the tool's result. The agents reach nothing but loopback: their configuration
names only the gateway (Codex's plugin sync and metrics off, as the README says), their home folders are new and
empty, and every other host is behind a proxy that only records that it was asked (Trap), which each test checks.

Each cell checks what the agent did (the command's output, the file it wrote), that the final answer it printed
quotes the tool's result, that the model saw that result, and that the gateway answered every request of the run
with a 2xx (its JSON request log)."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests import docs_support
from tests.agent_provider import QUOTE, AgentProvider, Task
from tests.conftest import free_port, spawn, stop, tool, unavailable
from tests.fake_upstream import GEMINI_KEY, FakeUpstream, aws_environment

AGENTS_DIR = Path(__file__).parent / "agents"
KINDS = ("anthropic", "openai", "responses", "bedrock", "gemini")
MODEL = {kind: f"acme/on-{kind}" for kind in KINDS}
UPSTREAM_PATH = {"anthropic": "/v1/messages", "openai": "/v1/chat/completions", "responses": "/v1/responses",
                 "bedrock": "/model/", "gemini": "/v1beta/models/"}  # then {modelId}/converse-stream, or :action
BEDROCK_NAME = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"  # Claude through an inference profile
RUN_SECONDS = 120  # an agent that has not finished by then is stuck; the test fails with its output


class Trap:
    """A proxy that is no proxy: the agents are told to send every request for another host through it, and it
    records what it was asked (the first line: CONNECT host:443, or GET http://...) and hangs up. An agent that
    reaches only loopback leaves it empty."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._socket.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(2)
                try:
                    self.asked.append(conn.recv(4096).decode(errors="replace").split("\r\n")[0])
                except OSError:
                    self.asked.append("(a connection that sent nothing)")

    def env(self) -> dict[str, str]:
        proxy = {name: self.url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
        proxy |= {name.lower(): value for name, value in proxy.items()}
        return proxy | {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}

    def close(self) -> None:
        self._socket.close()


@dataclass
class Gateway:
    url: str
    key: str
    log: Path
    trap: Trap


def npm_installed(folder: Path, work: Path, commands: dict[str, str]) -> Path:
    """`folder`'s package.json installed with `npm ci` (from its lockfile) in `work`: its node_modules/.bin, after
    checking that each of `commands` (command: package) runs the version the lockfile pins."""
    tool("node")
    npm = tool("npm")
    for name in ("package.json", "package-lock.json"):
        shutil.copy(folder / name, work / name)
    # Scripts run: Claude Code's postinstall puts its platform's native binary in place of a stub.
    command = [npm, "ci", "--no-audit", "--no-fund", "--prefer-offline"]
    proc = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        unavailable(f"npm ci failed in {work}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    bin_dir = work / "node_modules" / ".bin"
    lock = json.loads((folder / "package-lock.json").read_text())["packages"]
    for name, package in commands.items():
        version = subprocess.run([str(bin_dir / name), "--version"], capture_output=True, text=True, timeout=60,
                                 env=base_env(work / "home"), check=False)
        assert lock[f"node_modules/{package}"]["version"] in version.stdout, (name, version.stdout, version.stderr)
    return bin_dir


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/agents installed: its node_modules/.bin."""
    return npm_installed(AGENTS_DIR, tmp_path_factory.mktemp("agents"),
                         {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex"})


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@contextmanager
def agents_gateway(where: Path, upstreams: dict[str, Any], models: list[dict[str, Any]],
                   environment: Callable[[pytest.MonkeyPatch], None]) -> Iterator[Gateway]:
    """`specway serve` of these upstreams and models, logging every request, started with `environment` set."""
    config = where / "specway.yaml"
    config.write_text(yaml.safe_dump({"server": {"log_level": "info"}, "store": {"url": f"sqlite:///{where / 'specway.db'}"},
                                      "upstreams": upstreams, "models": models}))
    port = free_port()
    with pytest.MonkeyPatch.context() as mp:
        environment(mp)
        proc, key = spawn(config, port, where / "serve.log")
    trap = Trap()
    try:
        yield Gateway(f"http://127.0.0.1:{port}", key, where / "serve.log", trap)
    finally:
        stop(proc)
        trap.close()


@pytest.fixture(scope="module")
def gateway(fake: FakeUpstream, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    where = tmp_path_factory.mktemp("gateway")
    upstreams = {
        "anthropic": {"kind": "anthropic", "base_url": fake.anthropic_url},
        "openai": {"kind": "openai", "base_url": fake.url},
        "responses": {"kind": "responses", "base_url": fake.url},
        "bedrock": {"kind": "bedrock", "region": "us-east-1", "base_url": fake.bedrock_url},
        "gemini": {"kind": "gemini", "base_url": fake.google_url, "api_key_env": "SPECWAY_AGENTS_GEMINI_KEY"},
    }
    models = [{"id": MODEL[kind], "upstream": kind, "name": BEDROCK_NAME if kind == "bedrock" else f"{kind}-coder",
               "context_window": 200000, "reasoning": True, "price": {"input": 0, "output": 0}} for kind in KINDS]

    def environment(mp: pytest.MonkeyPatch) -> None:  # the gateway signs its Bedrock calls with the fake's AWS key
        aws_environment(mp, where)
        mp.setenv("SPECWAY_AGENTS_GEMINI_KEY", GEMINI_KEY)

    with agents_gateway(where, upstreams, models, environment) as gw:
        yield gw


def request_lines(log: Path, start: int) -> list[dict[str, object]]:
    """The gateway's request log lines written after byte `start` of its log."""
    with log.open("rb") as f:
        f.seek(start)
        lines = [json.loads(line) for line in f.read().decode().splitlines() if line.startswith("{")]
    return [line for line in lines if "status" in line and "route" in line]


def base_env(home: Path) -> dict[str, str]:
    """A clean environment: the PATH, and a new HOME; nothing of the caller's own configuration or keys."""
    home.mkdir(parents=True, exist_ok=True)
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "TMPDIR": str(home)}


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=RUN_SECONDS, check=False)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{command[0]} did not finish:\n{exc.stdout!r}\n{exc.stderr!r}") from None


def readme_block(name: str, gw: Gateway, kind: str) -> str:
    """The docs' `<!-- test: NAME -->` block (README.md, docs/clients.md) as a user of the gateway at `gw` and of the
    model on `kind` would write it: its URL, the relay key and every model id (`strong`, `fast`) replaced, nothing
    else."""
    text = docs_support.block(name).replace("http://127.0.0.1:8080", gw.url).replace("sk-sw-...", gw.key)
    return _MODEL_ID.sub(MODEL[kind], text)


_MODEL_ID = re.compile(r'(?<=[="])(?:strong|fast)(?=["\s]|$)', re.MULTILINE)  # a value, never a variable's name


def claude_code(bin_dir: Path, gw: Gateway, kind: str, prompt: str, cwd: Path, home: Path, api_key: bool) -> str:
    """Claude Code headless (`-p`) in the README's environment (with ANTHROPIC_API_KEY instead of
    ANTHROPIC_AUTH_TOKEN when `api_key`); its final answer."""
    exports = re.findall(r"^export (\w+)=(\S+)", readme_block("claude-code", gw, kind), re.MULTILINE)
    env = base_env(home) | gw.trap.env() | dict(exports) | {"CLAUDE_CONFIG_DIR": str(home / ".claude")}
    if api_key:
        env["ANTHROPIC_API_KEY"] = env.pop("ANTHROPIC_AUTH_TOKEN")
    command = [str(bin_dir / "claude"), "-p", prompt, "--output-format", "json", "--allowedTools", "Bash Write Edit"]
    proc = run(command, cwd, env)
    assert proc.returncode == 0, f"claude exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    out = json.loads(proc.stdout)
    assert not out.get("is_error"), out
    return str(out["result"])


def codex(bin_dir: Path, gw: Gateway, kind: str, prompt: str, cwd: Path, home: Path, api_key: bool) -> str:
    """Codex headless (`codex exec`) with the README's config.toml (offline: no plugin sync, no metrics) and model
    catalog; its final answer."""
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    config = readme_block("codex-config", gw, kind) + "\n" + readme_block("codex-offline", gw, kind)
    (codex_home / "config.toml").write_text(config)
    (codex_home / "specway-models.json").write_text(readme_block("codex-catalog", gw, kind))
    env = base_env(home) | gw.trap.env() | {"CODEX_HOME": str(codex_home), "SPECWAY_API_KEY": gw.key}
    last = home / "last-message.txt"
    command = [str(bin_dir / "codex"), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
               "--output-last-message", str(last), prompt]
    proc = run(command, cwd, env)
    assert proc.returncode == 0, f"codex exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert "not found" not in proc.stderr, proc.stderr[-3000:]  # "Model metadata for ... not found"
    return last.read_text()


AGENTS = {"claude": claude_code, "codex": codex}
FILE_TOOL = {"claude": "Write", "codex": "apply_patch"}
SHELL_TOOL = {"claude": "Bash", "codex": "exec_command"}


@pytest.mark.parametrize("cell", ["shell", "edit"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_agent_runs_its_tool_through_the_gateway(agents: Path, fake: FakeUpstream, gateway: Gateway, agent: str,
                                                 kind: str, cell: str, tmp_path: Path) -> None:
    token = f"specway-{secrets.token_hex(6)}"
    workdir = tmp_path / "work"
    workdir.mkdir()
    if cell == "shell":
        task = Task.shell(f"echo {token}")
        prompt = f"Run the shell command `echo {token}` and tell me what it printed."
    else:
        task = Task.edit("hello.txt", token)
        prompt = f"Create the file hello.txt in the current folder holding the one line {token}."
    fake.reset()
    provider = AgentProvider(task, workdir, marker=token)
    fake.responder = provider
    start = gateway.log.stat().st_size
    gateway.trap.asked.clear()
    answer = AGENTS[agent](agents, gateway, kind, prompt, workdir, tmp_path / "home", api_key=cell == "edit")

    expected_tool = SHELL_TOOL[agent] if cell == "shell" else FILE_TOOL[agent]
    assert [name for name, _ in provider.calls] == [expected_tool], provider.calls
    assert len(provider.results) == 1, (provider.results, answer)
    result = provider.results[0]
    if cell == "shell":
        assert token in result, result
    else:
        assert (workdir / "hello.txt").read_text().strip() == token
        assert "hello.txt" in result, result
    assert QUOTE in answer and result.strip() in answer, (answer, result)
    paths = {r.path for r in fake.requests}
    assert any(path.startswith(UPSTREAM_PATH[kind]) for path in paths), paths
    lines = request_lines(gateway.log, start)
    assert lines, "the gateway logged no request"
    assert [line for line in lines if not 200 <= int(line["status"]) < 300] == [], lines  # type: ignore[call-overload]
    assert gateway.trap.asked == [], "the agent reached for another host than the gateway"


@pytest.mark.parametrize("kind", KINDS)
def test_claude_code_counts_its_context_on_every_kind(agents: Path, fake: FakeUpstream, gateway: Gateway, kind: str,
                                                      tmp_path: Path) -> None:
    """`/context` counts the system prompt, each tool and the messages with POST /v1/messages/count_tokens (two dozen
    requests at once): every one answered, counted by an anthropic upstream itself and by the gateway elsewhere,
    within the context window the README's environment gives."""
    fake.reset()
    start = gateway.log.stat().st_size
    gateway.trap.asked.clear()
    workdir = tmp_path / "work"
    workdir.mkdir()
    report = claude_code(agents, gateway, kind, "/context", workdir, tmp_path / "home", api_key=False)
    assert f"**Model:** {MODEL[kind]}" in report and "/ 200k" in report, report
    lines = request_lines(gateway.log, start)
    assert [line for line in lines if not 200 <= int(line["status"]) < 300] == [], lines  # type: ignore[call-overload]
    assert gateway.trap.asked == [], "the agent reached for another host than the gateway"
    counts = [line for line in lines if line["route"] == "/v1/messages/count_tokens"]
    assert len(counts) > 1, lines
    upstream_counts = [r for r in fake.requests if r.path == "/v1/messages/count_tokens"]
    assert len(upstream_counts) == (len(counts) if kind == "anthropic" else 0)


APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
               "format": {"type": "grammar", "syntax": "lark", "definition": "start: /(.|\\n)+/"}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_apply_patch_comes_back_to_codex_as_its_custom_call(fake: FakeUpstream, gateway: Gateway, kind: str,
                                                            stream: bool, tmp_path: Path) -> None:
    """Codex's request shape without the CLI, whole and streamed: apply_patch, offered as a function where the
    upstream has no custom tools, comes back as a custom_tool_call whose input is the patch, and the next turn (the
    call and its output) reaches the upstream as that upstream's tool call and result."""
    token = f"specway-{secrets.token_hex(6)}"
    fake.reset()
    provider = AgentProvider(Task.edit("hello.txt", token), tmp_path, marker=token)
    fake.responder = provider
    prompt = {"role": "user", "content": f"Create hello.txt holding {token}."}
    body = {"model": MODEL[kind], "input": [prompt], "tools": [APPLY_PATCH], "stream": stream}
    headers = {"Authorization": f"Bearer {gateway.key}"}
    with httpx.Client(base_url=gateway.url, headers=headers, timeout=30) as client:
        call = _responses_call(client, body)
        patch = f"*** Begin Patch\n*** Add File: hello.txt\n+{token}\n*** End Patch\n"
        assert call["type"] == "custom_tool_call" and call["name"] == "apply_patch" and call["input"] == patch, call
        output = {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "Success. A hello.txt"}
        turn = [prompt, {k: call[k] for k in ("type", "call_id", "name", "input")}, output]
        answer = client.post("/v1/responses", json={**body, "input": turn, "stream": False})
    assert answer.status_code == 200, answer.text
    assert answer.json()["output_text"] == f"{QUOTE} Success. A hello.txt"
    assert provider.results == ["Success. A hello.txt"]


def _responses_call(client: httpx.Client, body: dict[str, object]) -> dict[str, object]:
    """The one tool call item of a Responses answer, whole or from its output_item.done event."""
    if not body["stream"]:
        reply = client.post("/v1/responses", json=body)
        assert reply.status_code == 200, reply.text
        calls = [item for item in reply.json()["output"] if item["type"].endswith("call")]
    else:
        with client.stream("POST", "/v1/responses", json=body) as reply:
            assert reply.status_code == 200, reply.read()
            events = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: ")]
        items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
        calls = [item for item in items if item["type"].endswith("call")]
    assert len(calls) == 1, calls
    return calls[0]
