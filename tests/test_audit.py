"""The audit log: every administration change recorded once, with who, when, what and the fields it changed before
and after, never a secret; read newest first in pages, filtered, through the API and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest

from generated.models import AuditAction
from handlers.administration import audit
from handlers.administration.tenancy import OPERATOR
from handlers.store import audit as rows
from tests.conftest import Live, serve

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Live]:
    with serve(None, tmp_path) as g:
        yield g


@pytest.fixture
def admin(gw: Live) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.url, headers=gw.headers, timeout=10) as c:
        yield c


def entries(admin: httpx.Client, **params: Any) -> list[dict[str, Any]]:
    r = admin.get("/v1/audit", params=params)
    assert r.status_code == 200, r.text
    return list(r.json()["data"])


def test_the_actions_are_the_specs() -> None:
    assert rows.ACTIONS == get_args(AuditAction.model_fields["root"].annotation)


def test_every_change_appears_once_with_who_what_and_no_secret(gw: Live, admin: httpx.Client) -> None:
    me = gw.run(gw.gateway.store.key_by_secret(gw.key)).id
    secrets = [gw.key]
    ws = admin.post("/v1/workspaces", json={"name": "team", "credit": "1.50"}).json()["id"]
    admin.patch(f"/v1/workspaces/{ws}", json={"name": "team a"})
    admin.patch(f"/v1/workspaces/{ws}", json={"name": "team a"})  # the same name: no change, no entry
    admin.post(f"/v1/workspaces/{ws}/credit", json={"amount": "2"})
    made = admin.post("/v1/keys", json={"name": "svc", "workspace_id": ws, "scopes": ["inference"]}).json()
    secrets.append(made["secret"])
    admin.patch(f"/v1/keys/{made['id']}", json={"limits": {"rpm": 30}})
    secrets.append(admin.post(f"/v1/keys/{made['id']}/rotate", json={"grace_seconds": 60}).json()["secret"])
    admin.delete(f"/v1/keys/{made['id']}")
    admin.delete(f"/v1/keys/{made['id']}")  # revoked already: no change
    admin.delete(f"/v1/workspaces/{ws}")
    admin.post(f"/v1/workspaces/{ws}/restore")
    with httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {secrets[-1]}"}) as used:
        used.post("/v1/chat/completions", json=CHAT)  # inference is no administration: not in the log

    log = entries(admin, limit=1000)
    mine = [e for e in log if e["target_id"] in (ws, made["id"])]
    assert [e["action"] for e in reversed(mine)] == [
        "workspace.create", "workspace.update", "workspace.credit", "key.create", "key.update", "key.rotate",
        "key.revoke", "workspace.revoke", "workspace.restore"]
    assert all(e["actor_key_id"] == me and e["object"] == "audit.entry" for e in mine)
    assert all(e["workspace_id"] == ws for e in mine)
    by = {e["action"]: e["changes"] for e in mine}
    assert by["workspace.create"]["name"] == {"before": None, "after": "team"}
    assert by["workspace.update"] == {"name": {"before": "team", "after": "team a"}}
    assert by["workspace.credit"] == {"credit": {"before": "1.50", "after": "3.50"}}
    assert by["key.update"] == {"limits": {"before": {"budget": None, "budget_period": "total", "rpm": None,
                                                      "tpm": None},
                                           "after": {"budget": None, "budget_period": "total", "rpm": 30,
                                                     "tpm": None}}}
    assert set(by["key.rotate"]) == {"rotated_at", "previous_secret_expires_at"}
    assert set(by["key.revoke"]) == {"revoked_at"} and set(by["workspace.revoke"]) == {"state", "revoked_at"}
    assert by["workspace.restore"]["state"] == {"before": "revoked", "after": "active"}
    assert [datetime.fromisoformat(e["at"]) for e in log] == sorted((datetime.fromisoformat(e["at"]) for e in log),
                                                                     reverse=True)
    # never a secret, nor its hash, nor its hint: not in the answers, not in the table
    text = json.dumps(log)
    forbidden = secrets + [hashlib.sha256(s.encode()).hexdigest() for s in secrets] + [
        s[:10] for s in secrets]
    assert not [s for s in forbidden if s in text]
    path = gw.gateway.config.store.url.removeprefix("sqlite:///")  # type: ignore[union-attr]
    with sqlite3.connect(path) as db:
        stored = json.dumps(db.execute("SELECT * FROM audit_log").fetchall())
        assert len(db.execute("SELECT id FROM audit_log").fetchall()) == len(log)
    assert not [s for s in forbidden if s in stored]


def test_pages_and_filters(gw: Live, admin: httpx.Client) -> None:
    made = [admin.post("/v1/workspaces", json={"name": f"w{i}"}).json()["id"] for i in range(5)]
    everything = entries(admin, limit=1000)
    seen: list[str] = []
    cursor = None
    while True:
        r = admin.get("/v1/audit", params={"limit": 2, **({"cursor": cursor} if cursor else {})}).json()
        assert len(r["data"]) <= 2 and r["has_more"] == (r["next_cursor"] is not None)
        seen += [e["id"] for e in r["data"]]
        if not r["has_more"]:
            break
        cursor = r["next_cursor"]
    assert seen == [e["id"] for e in everything] and len(set(seen)) == len(seen)
    creations = entries(admin, action="workspace.create")
    assert [e["target_id"] for e in creations][:5] == list(reversed(made))
    assert [e["target_id"] for e in entries(admin, target_id=made[2])] == [made[2]]
    assert [e["target_id"] for e in entries(admin, workspace_id=made[3])] == [made[3]]
    first = entries(admin, target_id=made[0])[0]["at"]
    assert {e["target_id"] for e in entries(admin, since=first, action="workspace.create")} >= set(made)
    assert entries(admin, until=first, target_id=made[4]) == []
    # One past datetime's range once in UTC is its first or last instant, as GET /v1/usage reads it (was a 500).
    assert entries(admin, since="9999-12-31T23:59:59-08:00") == []
    assert entries(admin, until="0001-01-01T00:36:32+08:25") == []
    assert entries(admin, since="0001-01-01T00:36:32+08:25", target_id=made[0])[0]["target_id"] == made[0]
    me = gw.run(gw.gateway.store.key_by_secret(gw.key)).id
    assert {e["target_id"] for e in entries(admin, key_id=me)} >= set(made)
    assert entries(admin, key_id="key_" + "0" * 16) == []
    for params, param in (({"since": "yesterday"}, "since"), ({"action": "key.explode"}, None),
                          ({"limit": 0}, None), ({"cursor": "nonsense"}, None)):
        r = admin.get("/v1/audit", params=params)  # None: refused by the spec's parameter schema already
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    gone = admin.get("/v1/audit", params={"cursor": "aud_" + "0" * 16})
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "cursor_not_found"
    assert entries(admin, key_id="", target_id="", limit=1000) == everything  # an empty filter is no filter


def _cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "handlers.cli", "--config", str(config), *args],
                          capture_output=True, text=True, env={**os.environ}, timeout=60, check=False)


def test_the_cli_records_as_the_operator_and_reads_it(tmp_path: Path) -> None:
    config = tmp_path / "specway.yaml"
    config.write_text(f"store:\n  url: sqlite:///{tmp_path / 's.db'}\n")
    ws = json.loads(_cli(config, "workspaces", "create", "--name", "ops", "--credit", "5").stdout)["id"]
    secret = _cli(config, "keys", "create", "--name", "ci", "--workspace", ws).stdout.strip()
    table = _cli(config, "audit")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "at\tby\taction\ttarget\tchanges"
    assert [line.split("\t")[1:3] for line in lines[1:3]] == [["cli", "key.create"], ["cli", "workspace.create"]]
    assert "credit: - -> 5" in lines[2] and secret not in table.stdout and secret[:10] not in table.stdout
    page = json.loads(_cli(config, "audit", "--json", "--limit", "1").stdout)
    assert page["has_more"] and page["data"][0]["action"] == "key.create" and page["data"][0]["actor_key_id"] is None
    more = _cli(config, "audit", "--limit", "1")
    assert f"more: specway audit --cursor {page['next_cursor']}" in more.stderr


async def test_a_change_made_elsewhere_is_recorded_through_the_hook(tmp_path: Path) -> None:
    """The configuration reload's door: audit.record, with what the reload changed."""
    from handlers.store import open_store

    store = open_store(f"sqlite:///{tmp_path / 's.db'}")
    await store.open()
    try:
        await audit.record(store, OPERATOR, "config.reload", ("config", "specway.yaml"), {"models": ["a"]},
                           {"models": ["a", "b"]})
        await audit.record(store, OPERATOR, "config.reload", ("config", "specway.yaml"), {"x": 1}, {"x": 1})
        found, cursor = await audit.page(store, OPERATOR)
        assert [(e.action, e.target_type, e.workspace_id) for e in found] == [("config.reload", "config", None)]
        assert found[0].changes["models"]["after"] == ["a", "b"] and cursor is None
        assert await store.prune_audit(datetime.now(UTC) - timedelta(days=1)) == 0
        assert await store.prune_audit(datetime.now(UTC) + timedelta(seconds=1)) == 1
    finally:
        await store.close()
