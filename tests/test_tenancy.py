"""Tenancy of the admin API: `admin` is the operator's scope over every workspace; `workspace:admin` administers
its own workspace only, and another workspace's objects are answered exactly like unknown ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from generated.scopes import DEFAULT_SCOPES
from tests.conftest import Live, serve

ROOT = Path(__file__).resolve().parents[1]
TENANT_SCOPES = ("inference", "models:read", "key:read", "workspace:admin")  # no explain:read, on purpose
UNKNOWN_WS = "ws_" + "0" * 16
UNKNOWN_KEY = "key_" + "0" * 16
CHAT = {"messages": [{"role": "user", "content": "hi"}]}

# Every admin operation and the scope it needs: a new admin operation must be placed here, deliberately.
SCOPE_OF = {
    "list_workspaces": "workspace:admin", "create_workspace": "admin", "get_workspace": "workspace:admin",
    "update_workspace": "workspace:admin", "revoke_workspace": "admin", "restore_workspace": "admin",
    "add_credit": "admin",
    "list_keys": "workspace:admin", "create_key": "workspace:admin", "get_admin_key": "workspace:admin",
    "update_key": "workspace:admin", "revoke_key": "workspace:admin", "rotate_key": "workspace:admin",
    "list_audit": "workspace:admin",
    "reload_config": "admin",  # the configuration is the operator's, shared by every workspace
}


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with serve(None, tmp_path_factory.mktemp("tenancy")) as g:
        yield g


@dataclass
class World:
    """Workspace A with its administrator (a `workspace:admin` key), workspace B with a key of its own."""

    gw: Live
    a: str
    b: str
    b_key_id: str
    b_secret: str
    tenant: httpx.Client
    operator: httpx.Client

    def client(self, secret: str) -> httpx.Client:
        return httpx.Client(base_url=self.gw.url, headers={"Authorization": f"Bearer {secret}"}, timeout=10)

    def key_id(self, secret: str) -> str:
        return str(self.gw.run(self.gw.gateway.store.key_by_secret(secret)).id)

    def b_key_untouched(self) -> None:
        shown = self.operator.get(f"/v1/keys/{self.b_key_id}").json()
        assert (shown["name"], shown["scopes"], shown["revoked_at"]) == ("test", ["inference", "key:read"], None)
        with self.client(self.b_secret) as c:
            assert c.get("/v1/key").status_code == 200


@pytest.fixture
def world(gw: Live) -> Iterator[World]:
    a, b = gw.new_workspace("tenant a"), gw.new_workspace("tenant b")
    b_secret = gw.create_key(scopes=("inference", "key:read"), workspace_id=b)
    b_key_id = str(gw.run(gw.gateway.store.key_by_secret(b_secret)).id)
    tenant_secret = gw.create_key(scopes=TENANT_SCOPES, workspace_id=a)
    with httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {tenant_secret}"}, timeout=10) as tenant, \
            httpx.Client(base_url=gw.url, headers=gw.headers, timeout=10) as operator:
        yield World(gw, a, b, b_key_id, b_secret, tenant, operator)


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert body["error"]["code"] == code, body
    return body


def assert_like_unknown(other: httpx.Response, unknown: httpx.Response, other_id: str, unknown_id: str) -> None:
    """The same status and the same body, but for the id the request named."""
    assert other.status_code == unknown.status_code == 404, (other.text, unknown.text)
    assert other.json() == json.loads(unknown.text.replace(unknown_id, other_id))


def test_every_admin_operation_declares_its_scope_in_the_spec() -> None:
    spec = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))
    declared = {op["operationId"]: op.get("x-scope") for item in spec["paths"].values() for op in item.values()
                if isinstance(op, dict) and "admin" in op.get("tags", [])}
    assert declared == SCOPE_OF
    assert {"workspace:admin", "admin"} <= set(spec["components"]["schemas"]["Scope"]["enum"])


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/v1/workspaces/{ws}", None),
    ("PATCH", "/v1/workspaces/{ws}", {"name": "taken over"}),
    ("POST", "/v1/keys", {"name": "planted", "workspace_id": "{ws}", "scopes": ["inference"]}),
])
def test_another_workspace_is_answered_like_an_unknown_one(world: World, method: str, path: str,
                                                          body: dict[str, Any] | None) -> None:
    def call(ws: str) -> httpx.Response:
        sent = None if body is None else json.loads(json.dumps(body).replace("{ws}", ws))
        return world.tenant.request(method, path.format(ws=ws), json=sent)

    assert_like_unknown(call(world.b), call(UNKNOWN_WS), world.b, UNKNOWN_WS)
    assert world.operator.get(f"/v1/workspaces/{world.b}").json()["name"] == "tenant b"
    assert [k["id"] for k in world.operator.get("/v1/keys", params={"workspace_id": world.b}).json()["data"]] == [
        world.b_key_id]


@pytest.mark.parametrize(("method", "body"), [
    ("GET", None),
    ("PATCH", {"scopes": ["inference", "models:read"], "limits": {"rpm": 1}}),
    ("PATCH", {"name": "renamed"}),
    ("DELETE", None),
])
def test_another_workspaces_key_is_answered_like_an_unknown_one(world: World, method: str,
                                                                body: dict[str, Any] | None) -> None:
    other = world.tenant.request(method, f"/v1/keys/{world.b_key_id}", json=body)
    unknown = world.tenant.request(method, f"/v1/keys/{UNKNOWN_KEY}", json=body)
    assert_like_unknown(other, unknown, world.b_key_id, UNKNOWN_KEY)
    world.b_key_untouched()


@pytest.mark.parametrize(("method", "path", "body"), [
    ("POST", "/v1/workspaces", {"name": "mine now", "credit": "100"}),
    ("POST", "/v1/workspaces/{ws}/credit", {"amount": "100"}),
    ("DELETE", "/v1/workspaces/{ws}", None),
    ("POST", "/v1/workspaces/{ws}/restore", None),
])
def test_operator_operations_are_refused_whatever_the_workspace(world: World, method: str, path: str,
                                                                body: dict[str, Any] | None) -> None:
    """Refused on the scope, before any id is looked at: the same answer for its own, another and an unknown id."""
    before = {w["id"]: w for w in world.operator.get("/v1/workspaces").json()["data"]}
    answers = [world.tenant.request(method, path.format(ws=ws), json=body) for ws in (world.a, world.b, UNKNOWN_WS)]
    for r in answers:
        message = assert_error(r, 403, "insufficient_scope")["error"]["message"]
        assert "'admin'" in message and "workspace:admin" not in message
    assert answers[0].json() == answers[1].json() == answers[2].json()
    assert {w["id"]: w for w in world.operator.get("/v1/workspaces").json()["data"]} == before
    world.b_key_untouched()


def test_listings_show_only_the_own_workspace(world: World) -> None:
    made = world.tenant.post("/v1/keys", json={"name": "svc", "scopes": ["inference"]}).json()
    workspaces = world.tenant.get("/v1/workspaces").json()["data"]
    assert [w["id"] for w in workspaces] == [world.a]
    own = {k["id"] for k in world.tenant.get("/v1/keys").json()["data"]}
    assert made["id"] in own and world.b_key_id not in own
    assert {k["workspace_id"] for k in world.tenant.get("/v1/keys").json()["data"]} == {world.a}
    other = world.tenant.get("/v1/keys", params={"workspace_id": world.b})
    unknown = world.tenant.get("/v1/keys", params={"workspace_id": UNKNOWN_WS})
    assert other.status_code == unknown.status_code == 200
    assert other.json() == unknown.json() == {"object": "list", "data": []}
    filtered = world.tenant.get("/v1/keys", params={"workspace_id": world.a}).json()["data"]
    assert {k["id"] for k in filtered} == own
    # the operator still sees every workspace and every key
    assert {world.a, world.b} <= {w["id"] for w in world.operator.get("/v1/workspaces").json()["data"]}
    assert {made["id"], world.b_key_id} <= {k["id"] for k in world.operator.get("/v1/keys").json()["data"]}


def test_decisions_of_another_workspace_are_never_listed(world: World) -> None:
    """GET /v1/route/decisions is scoped as explain is: a workspace:admin of A lists none of B's requests whatever it
    filters by (another workspace's key is answered like an unknown one), and an `admin` key lists its own
    workspace's only, as explain reads only those."""
    def ids(c: httpx.Client, **params: str) -> list[str]:
        r = c.get("/v1/route/decisions", params=params)
        assert r.status_code == 200, r.text
        return [d["id"] for d in r.json()["data"]]

    readers = [world.gw.create_key(scopes=(*TENANT_SCOPES, "explain:read"), workspace_id=ws) for ws in (world.a, world.b)]
    with world.client(readers[0]) as a, world.client(readers[1]) as b, world.client(world.b_secret) as b_key:
        theirs = b_key.post("/v1/chat/completions", json=CHAT).headers["x-specway-decision-id"]
        mine = a.post("/v1/chat/completions", json=CHAT).headers["x-specway-decision-id"]
        assert ids(a) == ids(a, model="specway/echo") == ids(a, outcome="ok") == [mine]
        other = a.get("/v1/route/decisions", params={"key_id": world.b_key_id})
        unknown = a.get("/v1/route/decisions", params={"key_id": UNKNOWN_KEY})
        assert other.json() == unknown.json() == {"object": "list", "data": [], "has_more": False, "next_cursor": None}
        assert ids(b) == ids(b, key_id=world.b_key_id) == [theirs]
        assert not {mine, theirs} & set(ids(world.operator))
        assert a.get(f"/v1/route/explain/{theirs}").status_code == world.operator.get(
            f"/v1/route/explain/{theirs}").status_code == 404


def test_a_workspace_admin_manages_its_own_workspace(world: World) -> None:
    assert world.tenant.get(f"/v1/workspaces/{world.a}").json()["name"] == "tenant a"
    assert world.tenant.patch(f"/v1/workspaces/{world.a}", json={"name": "tenant a2"}).json()["name"] == "tenant a2"
    r = world.tenant.post("/v1/keys", json={"name": "svc", "scopes": ["inference", "key:read"],
                                           "limits": {"budget": "2.50", "rpm": 30}})
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["workspace_id"], made["limits"]["budget"], made["limits"]["rpm"]) == (world.a, "2.50", 30)
    explicit = world.tenant.post("/v1/keys", json={"name": "named", "workspace_id": world.a, "scopes": ["inference"]})
    assert explicit.status_code == 201 and explicit.json()["workspace_id"] == world.a
    assert world.tenant.get(f"/v1/keys/{made['id']}").json()["name"] == "svc"
    r = world.tenant.patch(f"/v1/keys/{made['id']}", json={"limits": {"budget": "1.00", "budget_period": "daily"},
                                                          "scopes": ["inference"]})
    assert r.status_code == 200, r.text
    assert (r.json()["limits"]["budget"], r.json()["limits"]["budget_period"], r.json()["scopes"]) == (
        "1.00", "daily", ["inference"])
    with world.client(made["secret"]) as c:
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
        assert world.tenant.delete(f"/v1/keys/{made['id']}").json()["revoked_at"]
        assert_error(c.post("/v1/chat/completions", json=CHAT), 401, "invalid_api_key")


def test_a_workspace_admin_grants_only_scopes_it_holds(world: World) -> None:
    for scopes, param in ((["inference", "admin"], "scopes.1"), (["explain:read"], "scopes.0")):
        r = world.tenant.post("/v1/keys", json={"name": "escalate", "scopes": scopes})
        assert assert_error(r, 403, "insufficient_scope")["error"]["param"] == param
    assert len(world.tenant.get("/v1/keys").json()["data"]) == 1  # nothing was created
    peer = world.tenant.post("/v1/keys", json={"name": "peer", "scopes": ["workspace:admin"]})
    assert peer.status_code == 201 and peer.json()["scopes"] == ["workspace:admin"]
    r = world.tenant.patch(f"/v1/keys/{peer.json()['id']}", json={"scopes": ["workspace:admin", "admin"]})
    assert assert_error(r, 403, "insufficient_scope")["error"]["param"] == "scopes.1"
    assert world.tenant.get(f"/v1/keys/{peer.json()['id']}").json()["scopes"] == ["workspace:admin"]
    # a key named without scopes gets the defaults its creator holds (this one lacks explain:read)
    default = world.tenant.post("/v1/keys", json={"name": "default"}).json()
    assert default["scopes"] == [s for s in DEFAULT_SCOPES if s in TENANT_SCOPES] != list(DEFAULT_SCOPES)
    assert world.operator.post("/v1/keys", json={"name": "d", "workspace_id": world.a}).json()["scopes"] == list(
        DEFAULT_SCOPES)


def test_keys_holding_more_than_the_workspace_admin_are_read_only_to_it(world: World) -> None:
    op_secret = world.gw.create_key(scopes=("admin", "inference"), workspace_id=world.a)
    op_id = world.key_id(op_secret)
    assert world.tenant.get(f"/v1/keys/{op_id}").json()["scopes"] == ["admin", "inference"]
    assert op_id in {k["id"] for k in world.tenant.get("/v1/keys").json()["data"]}
    for method, body in (("PATCH", {"name": "mine"}), ("PATCH", {"scopes": ["inference"]}), ("DELETE", None)):
        r = world.tenant.request(method, f"/v1/keys/{op_id}", json=body)
        assert "'admin'" in assert_error(r, 403, "insufficient_scope")["error"]["message"]
    shown = world.operator.get(f"/v1/keys/{op_id}").json()
    assert (shown["name"], shown["scopes"], shown["revoked_at"]) == ("test", ["admin", "inference"], None)
    with world.client(op_secret) as c:
        assert c.get("/v1/workspaces").status_code == 200


def test_admin_stays_the_operators_scope_over_every_workspace(world: World) -> None:
    """An `admin` key of workspace B (and nothing else: `admin` grants `workspace:admin`) reaches workspace A."""
    with world.client(world.gw.create_key(scopes=("admin",), workspace_id=world.b)) as op:
        assert op.get(f"/v1/workspaces/{world.a}").status_code == 200
        assert op.post(f"/v1/workspaces/{world.a}/credit", json={"amount": "3"}).json()["credit"] == "3"
        assert op.patch(f"/v1/workspaces/{world.a}", json={"name": "renamed by op"}).status_code == 200
        made = op.post("/v1/keys", json={"name": "for a", "workspace_id": world.a, "scopes": ["admin"]})
        assert made.status_code == 201 and made.json()["workspace_id"] == world.a
        assert made.json()["id"] in {k["id"] for k in op.get("/v1/keys", params={"workspace_id": world.a}).json()["data"]}
        assert op.patch(f"/v1/keys/{made.json()['id']}", json={"scopes": ["inference"]}).status_code == 200
        assert op.delete(f"/v1/keys/{made.json()['id']}").json()["revoked_at"]
        assert op.post("/v1/workspaces", json={"name": "new"}).status_code == 201
        assert op.delete(f"/v1/workspaces/{world.a}").status_code == 200
    assert_error(world.tenant.get("/v1/keys"), 401, "invalid_api_key")  # A's keys were revoked with it


def test_without_an_admin_scope_every_admin_operation_is_403(world: World) -> None:
    secret = world.gw.create_key(scopes=DEFAULT_SCOPES, workspace_id=world.a)
    with world.client(secret) as c:
        for method, path in (("GET", "/v1/workspaces"), ("GET", f"/v1/workspaces/{world.a}"), ("GET", "/v1/keys"),
                             ("GET", "/v1/audit"),
                             ("POST", "/v1/keys"), ("GET", f"/v1/keys/{world.b_key_id}"),
                             ("DELETE", f"/v1/keys/{world.b_key_id}")):
            r = c.request(method, path, json={"name": "x"} if method == "POST" else None)
            message = assert_error(r, 403, "insufficient_scope")["error"]["message"]
            assert "'workspace:admin'" in message and "'admin'" in message
    world.b_key_untouched()


@pytest.mark.parametrize("kind", ["operator", "tenant"])
def test_no_key_revokes_or_changes_itself_through_the_api(world: World, kind: str) -> None:
    """An admin key that expired, downgraded or revoked itself (or its workspace) would lock the API out; a fuzzer
    holding one key with every scope finds its own id in GET /v1/keys and GET /v1/workspaces."""
    scopes = ("admin", "inference", "key:read") if kind == "operator" else TENANT_SCOPES
    secret = world.gw.create_key(scopes=scopes, workspace_id=world.a)
    me = world.key_id(secret)
    with world.client(secret) as c:
        for method, body in (("DELETE", None), ("PATCH", {"scopes": ["inference"]}), ("PATCH", {"scopes": list(scopes)}),
                             ("PATCH", {"expires_at": "2000-01-01T00:00:00Z"}), ("PATCH", {"limits": {"rpm": 1}}),
                             ("PATCH", {"models": []}), ("PATCH", {"name": "me", "policy": None})):
            assert_error(c.request(method, f"/v1/keys/{me}", json=body), 403, "cannot_modify_self")
        if kind == "operator":
            assert_error(c.delete(f"/v1/workspaces/{world.a}"), 403, "cannot_modify_self")
        assert c.patch(f"/v1/keys/{me}", json={"name": "renamed myself"}).json()["name"] == "renamed myself"
        shown = c.get(f"/v1/keys/{me}").json()
        assert (shown["scopes"], shown["expires_at"], shown["revoked_at"], shown["limits"]["rpm"]) == (
            list(scopes), None, None, None)
        assert c.get("/v1/keys").status_code == 200
    # another admin key can do it
    assert world.operator.delete(f"/v1/keys/{me}").json()["revoked_at"]


def test_the_cli_stays_the_operators_door(world: World, tmp_path: Path) -> None:
    """`specway keys ...` acts with no calling key: it grants `admin` in any workspace and changes any key."""
    config = tmp_path / "specway.yaml"
    config.write_text(f"store:\n  url: {world.gw.gateway.config.store.url}\n")  # type: ignore[union-attr]

    def cli(*args: str) -> str:
        run = subprocess.run([sys.executable, "-m", "handlers.cli", "--config", str(config), *args],
                             capture_output=True, text=True, env={**os.environ}, timeout=60, check=False)
        assert run.returncode == 0, run.stderr
        return run.stdout.strip()

    secret = cli("keys", "create", "--name", "op", "--scopes", "admin", "--workspace", world.b)
    with world.client(secret) as op:
        assert {world.a, world.b} <= {w["id"] for w in op.get("/v1/workspaces").json()["data"]}
    op_id = world.key_id(secret)
    assert json.loads(cli("keys", "update", op_id, "--scopes", "inference"))["scopes"] == ["inference"]
    assert cli("keys", "revoke", op_id) == f"revoked {op_id}"


def test_a_workspace_admin_rotates_its_own_workspaces_keys_only(world: World) -> None:
    made = world.tenant.post("/v1/keys", json={"name": "svc", "scopes": ["inference"]}).json()
    r = world.tenant.post(f"/v1/keys/{made['id']}/rotate", json={"grace_seconds": 60})
    assert r.status_code == 200 and r.json()["workspace_id"] == world.a, r.text
    with world.client(r.json()["secret"]) as c:
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
    other = world.tenant.post(f"/v1/keys/{world.b_key_id}/rotate", json={"grace_seconds": 0})
    unknown = world.tenant.post(f"/v1/keys/{UNKNOWN_KEY}/rotate", json={"grace_seconds": 0})
    assert_like_unknown(other, unknown, world.b_key_id, UNKNOWN_KEY)
    world.b_key_untouched()  # its secret still works
    op_id = world.key_id(world.gw.create_key(scopes=("admin", "inference"), workspace_id=world.a))
    assert "'admin'" in assert_error(world.tenant.post(f"/v1/keys/{op_id}/rotate"), 403,
                                     "insufficient_scope")["error"]["message"]
    me = world.key_id(str(world.tenant.headers["authorization"]).removeprefix("Bearer "))
    assert_error(world.tenant.post(f"/v1/keys/{me}/rotate"), 403, "cannot_modify_self")
    assert world.tenant.get("/v1/keys").status_code == 200  # its own secret unchanged


def test_a_workspace_admin_reads_its_own_workspaces_audit_log_only(world: World) -> None:
    made = world.tenant.post("/v1/keys", json={"name": "svc", "scopes": ["inference"]}).json()  # in A, by the tenant
    assert world.operator.post(f"/v1/workspaces/{world.b}/credit", json={"amount": "1"}).status_code == 200  # in B
    tenant_id = world.key_id(str(world.tenant.headers["authorization"]).removeprefix("Bearer "))
    own = world.tenant.get("/v1/audit").json()["data"]
    assert own and {e["workspace_id"] for e in own} == {world.a}
    assert [(e["action"], e["actor_key_id"]) for e in own if e["target_id"] == made["id"]] == [
        ("key.create", tenant_id)]
    empty = {"object": "list", "data": [], "has_more": False, "next_cursor": None}
    other = world.tenant.get("/v1/audit", params={"workspace_id": world.b})
    unknown = world.tenant.get("/v1/audit", params={"workspace_id": UNKNOWN_WS})
    assert other.status_code == unknown.status_code == 200 and other.json() == unknown.json() == empty
    for params in ({"target_id": world.b}, {"action": "workspace.credit"}):  # no filter reaches past its workspace
        assert world.tenant.get("/v1/audit", params=params).json() == empty
    everything = world.operator.get("/v1/audit", params={"limit": 1000}).json()["data"]
    assert {world.a, world.b} <= {e["workspace_id"] for e in everything}
    theirs = next(e["id"] for e in everything if e["workspace_id"] == world.b)  # a cursor of another workspace
    other = world.tenant.get("/v1/audit", params={"cursor": theirs})
    unknown = world.tenant.get("/v1/audit", params={"cursor": "aud_" + "0" * 16})
    assert_like_unknown(other, unknown, theirs, "aud_" + "0" * 16)
