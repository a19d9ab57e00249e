"""The blocks of docs/, run as written (tests/docs_support.py says what is changed and how): configurations are
served by `specway serve` with their providers replaced by local servers of the same kind, shell blocks run in the
folder of that configuration, and the outputs they show are compared with what the commands print."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests import fake_gemini
from tests.conftest import free_port, fresh_postgres, tool
from tests.docs_support import Terminal, block
from tests.fake_upstream import AWS_KEY, FakeUpstream

RUN = {
    "full-config", "self-hosted", "azure", "bedrock", "google", "routing-config", "routing-request", "routing-record",
    "agents-config", "admin-cli", "usage-cli", "usage", "ops-serve", "ops-postgres", "ops-db-upgrade",
    "ops-pg-backup", "ops-reload", "ops-sqlite-backup", "ops-sqlite-backup-python", "ops-redis", "ops-telemetry", "ops-env",
    "deploy-host", "layers", "rotate", "audit-cli", "console-csp",
}
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    with FakeUpstream() as f:
        yield f


@pytest.fixture
def term(tmp_path: Path) -> Terminal:
    return Terminal(tmp_path)


def providers(term: Terminal, fake: FakeUpstream, config: str) -> None:
    """The configuration's upstreams at the fake (each at the base URL of its kind), their key variables set."""
    for name, up in yaml.safe_load(config)["upstreams"].items():
        url = {"anthropic": fake.anthropic_url, "azure": fake.azure_url, "bedrock": fake.bedrock_url,
               "gemini": fake.google_url, "vertex": fake.google_url}.get(up["kind"], fake.url)
        term.env[f"SPECWAY_UPSTREAMS__{name.upper()}__BASE_URL"] = url
        if up.get("api_key_env"):
            term.env[up["api_key_env"]] = f"key-for-{name}"


def chat(term: Terminal, model: str | None = None, **body: object) -> httpx.Response:
    sent = {**CHAT, **({"model": model} if model else {}), **body}
    return httpx.post(f"{term.url}/v1/chat/completions", headers={"Authorization": f"Bearer {term.key}"}, json=sent,
                      timeout=30)


def credit(term: Terminal, amount: str = "10") -> None:
    headers = {"Authorization": f"Bearer {term.key}"}
    ws = httpx.get(f"{term.url}/v1/workspaces", headers=headers).json()["data"][0]["id"]
    assert httpx.post(f"{term.url}/v1/workspaces/{ws}/credit", headers=headers, json={"amount": amount}).is_success


def served_models(term: Terminal, fake: FakeUpstream, name: str) -> list[str]:
    """Serve docs block `name` as specway.yaml and send one chat to each of its models; their ids."""
    config = block(name)
    (term.folder / "specway.yaml").write_text(term.written(config))
    providers(term, fake, config)
    ids = [m["id"] for m in yaml.safe_load(config)["models"]]
    with term.serving() as term.key:
        credit(term)
        for model in ids:
            answer = chat(term, model)
            assert answer.status_code == 200 and answer.headers["x-specway-model"] == model, answer.text
    return ids


# --- providers.md -------------------------------------------------------------------------------------------------


def test_the_full_configuration_serves(term: Terminal, fake: FakeUpstream) -> None:
    assert served_models(term, fake, "full-config") == ["acme/fast", "acme/strong"]
    assert (term.folder / "specway.db").exists()


def test_a_self_hosted_server_is_free(term: Terminal, fake: FakeUpstream) -> None:
    assert served_models(term, fake, "self-hosted") == ["llama"]
    assert fake.requests[-1].body["model"] == "llama3.2" and "authorization" not in fake.requests[-1].headers


def test_azure_as_written(term: Terminal, fake: FakeUpstream) -> None:
    fake.azure_keys = {"key-for-azure"}  # the fake checks Azure's api-key header
    served_models(term, fake, "azure")
    sent = fake.requests[-1]
    assert (sent.path, sent.headers["api-key"], sent.body["model"]) == (
        "/openai/v1/chat/completions", "key-for-azure", "my-gpt-4o-mini")


def test_bedrock_as_written(term: Terminal, fake: FakeUpstream) -> None:
    """Signed with the AWS credentials of the environment, as the AWS CLI would find them; the fake checks SigV4."""
    term.env |= {"AWS_ACCESS_KEY_ID": AWS_KEY.access_key, "AWS_SECRET_ACCESS_KEY": AWS_KEY.secret,
                 "AWS_CONFIG_FILE": str(term.folder / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(term.folder / "none"),
                 "AWS_EC2_METADATA_DISABLED": "true"}
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE"):
        term.env.pop(name, None)
    served_models(term, fake, "bedrock")
    assert fake.requests[-1].path.endswith("-v1:0/converse")


def test_google_as_written(term: Terminal, fake: FakeUpstream) -> None:
    """The Gemini API with its key; Vertex AI signed in with a service account's key file (its token endpoint the
    fake's, which checks the signed assertion), a Gemini model through generateContent and Claude through rawPredict.
    """
    fake.gemini_keys = {"key-for-gemini"}
    account = fake_gemini.ServiceAccount.new()
    fake.issuer = fake_gemini.TokenIssuer(account)
    term.env["VERTEX_SERVICE_ACCOUNT"] = str(account.key_file(term.folder, fake.token_uri))
    assert served_models(term, fake, "google") == ["gemini-flash", "gemini-pro-vertex", "claude-vertex"]
    assert [r.path.rsplit("/", 1)[-1] for r in fake.requests if r.path != "/token"] == [
        "gemini-2.5-flash:generateContent", "gemini-2.5-pro:generateContent", "claude-sonnet-4-5@20250929:rawPredict"]
    assert fake.issuer.issued and fake.issuer.refused == []


# --- console.md -----------------------------------------------------------------------------------------------------


def test_the_console_is_served_with_the_policy_shown(term: Terminal) -> None:
    with term.serving() as term.key:
        for path in ("/console", "/console/console.js"):
            answer = httpx.get(f"{term.url}{path}")
            assert answer.status_code == 200, path
            assert answer.headers["content-security-policy"] == " ".join(block("console-csp").split()), path


# --- routing.md ---------------------------------------------------------------------------------------------------


def test_the_routing_example(term: Terminal) -> None:
    (term.folder / "specway.yaml").write_text(block("routing-config"))
    with term.serving() as term.key:
        printed = term.sh(block("routing-request"))
    got = json.loads(printed.strip().splitlines()[-1])
    shown = json.loads(block("routing-record"))
    assert set(got) == set(shown)
    same = ("object", "format", "requested_model", "effort", "policy", "stream", "candidates", "model", "outcome",
            "explanation", "cost", "pricing", "left_out")
    assert {k: got[k] for k in same} == {k: shown[k] for k in same}
    assert [(a["model"], a["status"]) for a in got["attempts"]] == [(a["model"], a["status"]) for a in shown["attempts"]]
    headers = (term.folder / "headers.txt").read_text().lower()
    assert f"x-specway-decision-id: {got['id']}" in headers and "x-specway-model: acme/strong" in headers


# --- clients.md ---------------------------------------------------------------------------------------------------


def test_the_coding_agents_configuration_serves(term: Terminal, fake: FakeUpstream) -> None:
    assert served_models(term, fake, "agents-config") == ["strong", "fast"]
    assert fake.requests[-1].path == "/v1/responses"  # fast is on the responses upstream


# --- administration.md --------------------------------------------------------------------------------------------


def test_the_administration_commands(term: Terminal, fake: FakeUpstream) -> None:
    config = block("real-providers")  # the README's specway.yaml: the `fast` model the commands name
    (term.folder / "specway.yaml").write_text(config)
    providers(term, fake, config)
    with term.serving() as term.key:
        out = term.sh(block("admin-cli"))
        assert "revoked" in out and "restored" in out and '"credit": "35.00"' in out
        credit(term)
        assert chat(term).status_code == 200
        table = term.sh(block("usage-cli"))
        assert table.splitlines()[0].startswith("start\t") and '"totals"' in table
        report = json.loads(term.sh(block("usage")))
        assert report["object"] == "usage" and report["group_by"] == ["model"]
        assert report["data"][0]["model"] == "fast" and report["totals"]["requests"] == 1


def test_rotating_a_key(term: Terminal) -> None:
    with term.serving() as term.key:
        printed = term.sh(block("rotate"))
        new = printed.splitlines()[-2]  # the last line is the answer to the old secret
        assert new.startswith("sk-sw-") and new != term.key
        told = json.loads(printed.splitlines()[-1])
        assert (told["id"], told["secret"]) == (term.ids["key_..."], "previous") and told["rotation"]
        printed = term.sh(block("audit-cli"))  # the rotation, and the first key's creation before it
    table, page = printed.splitlines()[0], json.loads(printed.splitlines()[-1])
    assert table == "at\tby\taction\ttarget\tchanges" and page["has_more"]
    assert [e["action"] for e in page["data"]] == ["key.rotate", "key.create"]
    assert '"action": "key.rotate"' in printed and new not in printed and term.key not in printed


# --- operations.md ------------------------------------------------------------------------------------------------


def test_serving_with_workers(term: Terminal) -> None:
    (term.folder / "specway.yaml").write_text("")  # any configuration: the embedded defaults
    term.replace["8081"] = str(port := free_port())
    with term.serving(block("ops-serve"), port=port):
        assert httpx.get(f"http://127.0.0.1:{port}/readyz").json()["status"] == "ok"


def test_reloading_the_configuration(term: Terminal, fake: FakeUpstream) -> None:
    """The guide's two ways, on two workers: the signal reloads both, the API call finds nothing left to change."""
    tool("pkill")
    settings = {"upstreams": {"fake": {"kind": "openai", "base_url": fake.url}},
                "models": [{"id": "acme/fast", "upstream": "fake", "name": "fast"}]}
    (term.folder / "specway.yaml").write_text(json.dumps(settings))
    with term.serving(".venv/bin/specway serve --workers 2") as term.key:
        settings["models"].append({"id": "acme/smart", "upstream": "fake", "name": "smart"})
        (term.folder / "specway.yaml").write_text(json.dumps(settings))
        answer = json.loads(term.sh(block("ops-reload")))
        assert answer["object"] == "config.reload" and answer["other_workers_signalled"] is True
        def smart() -> int:  # a new connection each time, so both workers are asked
            return httpx.post(f"{term.url}/v1/chat/completions", headers={"Authorization": f"Bearer {term.key}"},
                              json={"model": "acme/smart", **CHAT}, timeout=10).status_code

        deadline = time.monotonic() + 15  # the supervisor passes the word on within a second
        while [smart() for _ in range(8)] != [200] * 8:
            assert time.monotonic() < deadline, term.log()
            time.sleep(0.2)
        assert "configuration revision" in term.log() and "replaces" in term.log()


def test_postgresql_upgrade_and_backups(term: Terminal) -> None:
    tool("pg_dump"), tool("pg_restore")
    with fresh_postgres() as url, fresh_postgres() as restored:
        # the guide's server, and the database restored into, are these two (longest first: one is a prefix)
        term.replace |= {"postgresql://specway@db.internal:5432/specway_restored": restored,
                         "postgresql://specway@db.internal:5432/specway": url}
        (term.folder / "specway.yaml").write_text(term.written(block("ops-postgres")))
        assert term.sh(block("ops-db-upgrade")) == "database schema is up to date\n"
        with term.serving() as term.key:
            assert term.key.startswith("sk-sw-")
        term.sh(block("ops-pg-backup"))
        (term.folder / "specway.yaml").write_text(f"store: {{url: '{restored}'}}\n")
        assert "first key" in term.sh("specway keys list")  # the restored database has the key


@pytest.mark.parametrize("name", ["ops-sqlite-backup", "ops-sqlite-backup-python"])
def test_sqlite_backups(term: Terminal, name: str) -> None:
    if name == "ops-sqlite-backup":
        tool("sqlite3")
    with term.serving():  # the gateway running on specway.db while it is backed up
        term.sh(block(name))
    with sqlite3.connect(term.folder / "backup.db") as db:
        assert db.execute("SELECT name FROM keys").fetchall() == [("first key",)]


def test_redis_limits(term: Terminal) -> None:
    (term.folder / "specway.yaml").write_text(block("ops-redis"))
    with term.serving():
        assert httpx.get(f"{term.url}/readyz").json() == {"status": "ok", "checks": {"store": "ok", "limits": "ok"}}


def test_tracing_settings(term: Terminal) -> None:
    """The collector's address is a local port; with nothing there, spans are dropped and requests unaffected."""
    term.replace["http://collector:4318"] = f"http://127.0.0.1:{free_port()}"
    term.env["SPECWAY_OTLP_HEADERS"] = "authorization=Bearer%20abc"
    (term.folder / "specway.yaml").write_text(term.written(block("ops-telemetry")))
    with term.serving() as term.key:
        assert chat(term).status_code == 200


def test_the_configuration_from_the_environment(term: Terminal) -> None:
    (term.folder / "specway.yaml").write_text("")
    with term.serving():
        pass  # its store now has the first key
    assert "first key" in term.sh(block("ops-env"))


# --- deployment.md ------------------------------------------------------------------------------------------------


def test_listening_on_every_interface(term: Terminal) -> None:
    for command in block("deploy-host").strip().splitlines():
        with term.serving(command.split("#")[0].strip()):
            assert httpx.get(f"{term.url}/healthz").status_code == 200


# --- architecture.md ----------------------------------------------------------------------------------------------


def test_the_layers_are_the_packages() -> None:
    """Each line names a package of the code, and the list is every sub-package of handlers/."""
    root = Path(__file__).resolve().parents[1]
    named = [line.split()[0] for line in block("layers").splitlines() if line.strip()]
    assert all((root / path).is_dir() for path in named), named
    packages = {f"handlers/{p.parent.name}" for p in (root / "handlers").glob("*/__init__.py")}
    assert packages - {"handlers/cli"} <= set(named), packages - set(named)
