"""Clients generated from the served spec: what a user gets from `GET /openapi.json` with the common generators.

Against one live `specway serve` (its own process, the embedded defaults: the echo upstream):

- Python: openapi-python-client generates a package from the served document, with zero warnings; it is imported
  and every operation is driven through it.
- TypeScript: openapi-typescript generates the types (zero warnings), tests/clients_ts/check.ts calls every operation
  through openapi-fetch; tsc type-checks it (strict) and node runs it.

The generation runs here, from the served document, so a spec change that breaks either generator fails this test.
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from handlers.edge import paths
from tests.conftest import free_port, spawn, stop, tool, unavailable
from tests.docs_support import Terminal, block

TS_DIR = Path(__file__).parent / "clients_ts"
BIN = Path(sys.executable).parent  # openapi-python-client and ruff (its post-generation hook) live beside python
ECHO = "specway/echo"
CHAT = {"messages": [{"role": "user", "content": "Say hello."}]}


@dataclass(frozen=True)
class Served:
    url: str
    key: str


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """`specway serve` on a fresh SQLite store; the key is the first key it printed (every scope)."""
    tmp = tmp_path_factory.mktemp("generated_clients")
    config = tmp / "specway.yaml"
    config.write_text(f"store:\n  url: sqlite:///{tmp / 'specway.db'}\n")
    port = free_port()
    proc, key = spawn(config, port, tmp / "serve.log")
    try:
        assert key.startswith("sk-sw-"), key
        yield Served(f"http://127.0.0.1:{port}", key)
    finally:
        stop(proc)
    assert "Traceback" not in (tmp / "serve.log").read_text()


def test_served_document_is_the_bundled_file(served: Served) -> None:
    r = httpx.get(f"{served.url}/openapi.json")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.content == paths.SPEC.read_bytes()  # byte for byte: $refs and schema names kept
    assert "ResponseObject" in r.json()["components"]["schemas"]
    docs = httpx.get(f"{served.url}/docs/")
    assert docs.status_code == 200 and "/openapi.json" in docs.text
    wrong = httpx.post(f"{served.url}/openapi.json", json={})
    assert wrong.status_code == 405 and wrong.headers["allow"] == "GET"


# --- Python: openapi-python-client ------------------------------------------------------------------------------


def _generate_python(url: str, out: Path) -> ModuleType:
    """The package openapi-python-client makes of the served document, imported (every module of it)."""
    exe = BIN / "openapi-python-client"
    if not exe.exists():
        unavailable("openapi-python-client is not installed (pip install -e '.[dev]')")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([str(exe), "generate", "--url", f"{url}/openapi.json", "--meta", "none",
                           "--output-path", str(out / "specway_client")],
                          cwd=out, env=env, capture_output=True, text=True, timeout=120, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "warning" not in output.lower() and "error" not in output.lower(), output
    sys.path.insert(0, str(out))
    try:
        package = importlib.import_module("specway_client")
        for info in pkgutil.walk_packages(package.__path__, "specway_client."):
            importlib.import_module(info.name)  # a name clash with the generator's own types fails here
    finally:
        sys.path.remove(str(out))
    return package


def _op(name: str) -> Any:
    return importlib.import_module(f"specway_client.api.{name}")


def _model(name: str) -> Any:
    return getattr(importlib.import_module("specway_client.models"), name)


def _ok(response: Any, status: int = 200) -> Any:
    """The parsed body of a `sync_detailed` answer, checked to be the documented model (not an Error)."""
    assert response.status_code == status, response.content
    assert response.parsed is not None and type(response.parsed).__name__ != "Error", response.content
    return response.parsed


def test_python_client(served: Served, tmp_path: Path) -> None:
    started = time.perf_counter()
    _generate_python(served.url, tmp_path)
    generated_in = time.perf_counter() - started
    from specway_client import AuthenticatedClient, Client  # type: ignore[import-not-found]

    client = AuthenticatedClient(base_url=served.url, token=served.key, raise_on_unexpected_status=True)
    anonymous = Client(base_url=served.url, raise_on_unexpected_status=True)

    # Operations: no key needed.
    assert _ok(_op("operations.healthz").sync_detailed(client=anonymous)).status.value == "ok"
    assert _ok(_op("operations.readyz").sync_detailed(client=anonymous)).status.value == "ok"

    # Inference, plain: each answer parses into its generated model, and carries a decision id.
    chat_request = _model("ChatCompletionRequest").from_dict({**CHAT, "model": ECHO})
    chat = _op("inference.create_chat_completion").sync_detailed(client=client, body=chat_request)
    completion = _ok(chat)
    assert type(completion).__name__ == "ChatCompletion" and completion.choices[0].message.content
    decision_id = chat.headers["x-specway-decision-id"]
    assert completion.id == f"chatcmpl-{decision_id}"

    responses_request = _model("ResponsesRequest").from_dict({"input": "Say hello.", "model": ECHO})
    answer = _ok(_op("inference.create_response").sync_detailed(client=client, body=responses_request))
    assert type(answer).__name__ == "ResponseObject" and answer.id.startswith("resp_") and answer.output_text

    messages_request = _model("MessagesRequest").from_dict({**CHAT, "model": ECHO, "max_tokens": 64})
    message = _ok(_op("inference.create_message").sync_detailed(client=client, body=messages_request,
                                                                 anthropic_version="2023-06-01"))
    assert type(message).__name__ == "Message" and message.id.startswith("msg_") and message.content[0].text
    count = _ok(_op("inference.count_message_tokens").sync_detailed(client=client, body=messages_request))
    assert type(count).__name__ == "MessageTokensCount" and count.input_tokens > 0

    # Streams: the generated operations parse only JSON bodies, so a stream is read through the client's own httpx
    # client (same base URL and key), with the generated request model as the body.
    with client.get_httpx_client().stream("POST", "/v1/chat/completions",
                                          json={**chat_request.to_dict(), "stream": True}) as stream:
        assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
        events = [line for line in stream.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]" and len(events) > 2

    # Catalog: models, one model, the calling key, the explanation of the chat request above.
    listed = _ok(_op("catalog.list_models").sync_detailed(client=client))
    assert ECHO in [m.id for m in listed.data]
    assert _ok(_op("catalog.get_model").sync_detailed(ECHO, client=client)).id == ECHO
    me = _ok(_op("catalog.get_key").sync_detailed(client=client))
    assert type(me).__name__ == "KeyInfo" and "admin" in [str(s.value if hasattr(s, "value") else s) for s in me.scopes]
    decision = _ok(_op("catalog.explain_decision").sync_detailed(decision_id, client=client))
    assert decision.id == decision_id and decision.model == ECHO
    preview = _ok(_op("catalog.preview_chat_completion").sync_detailed(client=client, body=chat_request))
    assert type(preview).__name__ == "RoutePreview" and preview.candidates[0].model == ECHO
    deployments = _ok(_op("catalog.list_deployments").sync_detailed(client=client))
    assert [d.catalog_ids for d in deployments.data] == [[ECHO]] and deployments.data[0].state.value == "healthy"
    missing = _op("catalog.explain_decision").sync_detailed("0" * 32, client=client)
    assert missing.status_code == 404 and type(missing.parsed).__name__ == "Error"
    assert missing.parsed.error.code == "decision_not_found"

    # Admin, end to end: a workspace, its credit, a key in it used and revoked, then the workspace revoked.
    admin = "specway_client.api.admin"
    create_ws = importlib.import_module(f"{admin}.create_workspace")
    ws = _ok(create_ws.sync_detailed(client=client, body=_model("WorkspaceCreate")(name="generated", credit="1.5")),
             201)
    assert type(ws).__name__ == "Workspace" and ws.name == "generated"
    credited = _ok(_op("admin.add_credit").sync_detailed(ws.id, client=client, body=_model("CreditAdd")(amount="2")))
    assert float(credited.credit) == 3.5
    assert ws.id in [w.id for w in _ok(_op("admin.list_workspaces").sync_detailed(client=client)).data]
    assert _ok(_op("admin.get_workspace").sync_detailed(ws.id, client=client)).name == "generated"
    renamed = _ok(_op("admin.update_workspace").sync_detailed(ws.id, client=client,
                                                               body=_model("WorkspaceUpdate")(name="renamed")))
    assert renamed.name == "renamed"

    key_create = _model("KeyCreate").from_dict({"name": "gen", "workspace_id": ws.id,
                                                "scopes": ["inference", "key:read"], "models": [ECHO]})
    created = _ok(_op("admin.create_key").sync_detailed(client=client, body=key_create), 201)
    assert type(created).__name__ == "KeyCreated" and created.secret.startswith("sk-sw-")
    assert created.workspace_id == ws.id
    assert created.id in [k.id for k in _ok(_op("admin.list_keys").sync_detailed(client=client)).data]
    assert _ok(_op("admin.get_admin_key").sync_detailed(created.id, client=client)).name == "gen"
    updated = _ok(_op("admin.update_key").sync_detailed(created.id, client=client,
                                                        body=_model("KeyUpdate").from_dict({"name": "gen2"})))
    assert updated.name == "gen2"
    theirs = AuthenticatedClient(base_url=served.url, token=created.secret)
    assert _ok(_op("catalog.get_key").sync_detailed(client=theirs)).id == created.id
    revoked = _ok(_op("admin.revoke_key").sync_detailed(created.id, client=client))
    assert revoked.revoked_at
    refused = _op("catalog.get_key").sync_detailed(client=theirs)
    assert refused.status_code == 401 and refused.parsed.error.code == "invalid_api_key"
    gone = _ok(_op("admin.revoke_workspace").sync_detailed(ws.id, client=client))
    assert gone.id == ws.id

    # Metrics last: every operation above is counted.
    text = _ok(_op("operations.metrics").sync_detailed(client=anonymous))
    assert "specway_requests_total" in text and 'route="/v1/workspaces/{workspaceId}/credit"' in text
    print(f"openapi-python-client generated and imported in {generated_in:.1f} s")


# --- TypeScript: openapi-typescript + openapi-fetch, checked by tsc ----------------------------------------------------


@pytest.fixture(scope="module")
def ts_clients(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/clients_ts installed with `npm ci` (from its lockfile) in a temporary copy."""
    tool("node")
    npm = tool("npm")
    work = tmp_path_factory.mktemp("clients_ts")
    for name in ("package.json", "package-lock.json", "tsconfig.json", "check.ts"):
        shutil.copy(TS_DIR / name, work / name)
    command = [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline"]
    proc = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        unavailable(f"npm ci failed in {work}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return work


def _run(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """The command's stdout when it is given an env (node's JSON), else stdout and stderr (a tool's messages)."""
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{' '.join(command)} failed:\n{output[-4000:]}"
    return proc.stdout if env is not None else output


def test_typescript_client(served: Served, ts_clients: Path) -> None:
    node = tool("node")
    bin_dir = ts_clients / "node_modules" / ".bin"
    generated = _run([str(bin_dir / "openapi-typescript"), f"{served.url}/openapi.json", "-o", "schema.d.ts"],
                     ts_clients)
    assert "warn" not in generated.lower(), generated
    _run([str(bin_dir / "tsc"), "-p", "tsconfig.json"], ts_clients)  # strict; nothing is emitted on a type error
    env = {**os.environ, "SPECWAY_URL": served.url, "SPECWAY_KEY": served.key}
    out = json.loads(_run([node, "out/check.js"], ts_clients, env))
    assert out["healthz"] == "ok" and out["readyz"] == "ok"
    assert out["chat"]["object"] == "chat.completion" and out["chat"]["id"] == f"chatcmpl-{out['chat']['decision']}"
    assert out["response"]["object"] == "response" and out["response"]["id"].startswith("resp_")
    assert out["message"]["type"] == "message" and out["message"]["id"].startswith("msg_")
    assert out["countTokens"] > 0
    assert out["streams"]["chat"][-1] == "[DONE]"
    assert out["streams"]["responses"][-1] == "response.completed"
    assert out["streams"]["messages"][-1] == "message_stop"
    assert ECHO in out["models"] and out["model"] == ECHO and "admin" in out["keyScopes"]
    assert out["explain"] == {"id": out["chat"]["decision"], "model": ECHO}
    assert out["explainMissing"] == {"status": 404, "code": "decision_not_found"}
    assert out["workspace"] == {"created": "ts", "credit": 3.5, "listed": True, "got": "ts", "renamed": "ts2",
                                "revoked": True}
    assert out["key"] == {"secret": True, "listed": True, "got": "ts-key", "renamed": "ts-key2", "used": True,
                          "revoked": True, "refused": 401}
    assert out["metrics"] is True


# --- the blocks of docs/clients.md, run as written --------------------------------------------------------------


def test_the_docs_python_client_blocks_run(served: Served, tmp_path: Path) -> None:
    term = Terminal(tmp_path, port=int(served.url.rsplit(":", 1)[1]), key=served.key)
    term.sh(block("generated-python-generate"))
    printed = term.python(block("generated-python")).splitlines()
    assert len(printed) == 1 and printed[0].strip(), printed  # the answer's text


def test_the_docs_typescript_client_blocks_run(served: Served, ts_clients: Path) -> None:
    node = tool("node")
    term = Terminal(ts_clients, port=int(served.url.rsplit(":", 1)[1]), key=served.key)
    term.env["PATH"] = f"{ts_clients / 'node_modules' / '.bin'}{os.pathsep}{term.env['PATH']}"
    term.sh(block("generated-ts-generate"))  # npx finds the pinned openapi-typescript of node_modules
    (ts_clients / "hello.ts").write_text(term.written(block("generated-ts")))
    (ts_clients / "tsconfig.hello.json").write_text(json.dumps({"extends": "./tsconfig.json", "files": ["hello.ts"]}))
    _run([str(ts_clients / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.hello.json"], ts_clients)
    printed = _run([node, "out/hello.js"], ts_clients, dict(os.environ)).splitlines()
    assert len(printed) == 1 and printed[0].strip() and "error" not in printed[0], printed
