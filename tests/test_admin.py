"""The admin API and the CLI over one implementation: workspaces, credit, keys, scopes and allowlists."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest

from generated import models
from handlers.administration import accounts
from handlers.store.base import Key
from tests.conftest import Live, serve

CONFIG = {
    "upstreams": {"echo": {"kind": "echo"}},
    "models": [
        {"id": "acme/fast", "upstream": "echo", "name": "fast", "aliases": ["fast"]},
        {"id": "acme/strong", "upstream": "echo", "name": "strong", "aliases": ["strong"]},
    ],
}
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Live]:
    with serve(CONFIG, tmp_path) as g:
        yield g


@pytest.fixture
def admin(gw: Live) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gw.url, headers=gw.headers, timeout=10) as c:
        yield c


def client(gw: Live, secret: str) -> httpx.Client:
    return httpx.Client(base_url=gw.url, headers={"Authorization": f"Bearer {secret}"}, timeout=10)


def test_workspace_lifecycle(admin: httpx.Client) -> None:
    r = admin.post("/v1/workspaces", json={"name": "team a", "credit": "10.50"})
    assert r.status_code == 201, r.text
    ws = models.Workspace.model_validate(r.json())
    assert (ws.name, ws.credit) == ("team a", "10.50")
    assert Decimal(ws.reserved) == Decimal(ws.spend_total) == 0  # both are shown, as amounts
    assert admin.post(f"/v1/workspaces/{ws.id}/credit", json={"amount": "2.25"}).json()["credit"] == "12.75"
    assert admin.patch(f"/v1/workspaces/{ws.id}", json={"name": "team b"}).json()["name"] == "team b"
    assert ws.id in [w["id"] for w in admin.get("/v1/workspaces").json()["data"]]
    assert admin.get("/v1/workspaces/ws_nope").status_code == 404
    assert admin.post("/v1/workspaces/ws_nope/credit", json={"amount": "1"}).status_code == 404
    assert admin.post(f"/v1/workspaces/{ws.id}/credit", json={"amount": "-1.25"}).json()["credit"] == "11.50"
    too_much = admin.post(f"/v1/workspaces/{ws.id}/credit", json={"amount": "-12"})
    assert too_much.status_code == 409 and too_much.json()["error"]["code"] == "credit_below_zero"
    assert too_much.json()["error"]["param"] == "amount"
    assert "it has 11.50, so at most -11.50 can be taken back" in too_much.json()["error"]["message"]
    odd = admin.post(f"/v1/workspaces/{ws.id}/credit", json={"amount": "1e3"})
    assert odd.status_code == 400 and odd.json()["error"]["message"] == (
        'amount: must be an amount such as "10.00", or a negative one such as "-2.50" to take credit back: at most '
        "12 digits before and 12 after the point, not '1e3'.")
    assert admin.post(f"/v1/workspaces/{ws.id}/credit", json={"amount": "-11.50"}).json()["credit"] == "0"


@pytest.mark.parametrize("limits", [{"rpm": 10**19}, {"tpm": 2**31}, {"rpm": 0}])
def test_limits_out_of_range_are_400(admin: httpx.Client, limits: dict[str, int]) -> None:
    for r in (admin.post("/v1/keys", json={"name": "x", "limits": limits}),
              admin.patch(f"/v1/keys/{admin.get('/v1/key').json()['id']}", json={"limits": limits})):
        field = next(iter(limits))
        assert r.status_code == 400 and r.json()["error"]["param"] == f"limits.{field}", r.text


def test_key_secret_is_shown_once_and_never_listed(gw: Live, admin: httpx.Client) -> None:
    r = admin.post("/v1/keys", json={"name": "svc", "scopes": ["inference"]})
    assert r.status_code == 201, r.text
    created = models.KeyCreated.model_validate(r.json())
    assert created.secret.startswith("sk-sw-")
    for response in (admin.get("/v1/keys"), admin.get(f"/v1/keys/{created.id}")):
        assert created.secret not in response.text and "secret" not in response.text
    with client(gw, created.secret) as c:
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
    db = sqlite3.connect(gw.gateway.config.store.url.removeprefix("sqlite:///"))  # type: ignore[union-attr]
    dump = "\n".join(db.iterdump())
    assert created.secret not in dump and created.secret[6:] not in dump


def test_update_and_revoke(gw: Live, admin: httpx.Client) -> None:
    key = admin.post("/v1/keys", json={"name": "svc"}).json()
    r = admin.patch(f"/v1/keys/{key['id']}", json={"scopes": ["inference", "key:read"], "models": ["fast"],
                                                   "limits": {"rpm": 10, "budget": "5.00"}})
    assert r.status_code == 200, r.text
    updated = models.Key.model_validate(r.json())
    assert (updated.scopes, updated.models, updated.limits.rpm, updated.limits.budget) == (
        ["inference", "key:read"], ["fast"], 10, "5.00")
    # a second PATCH changes only what it names: the limits it leaves out keep their values (caught by `make mutate`)
    r = admin.patch(f"/v1/keys/{key['id']}", json={"name": "svc 2", "expires_at": "2999-01-01T00:00:00Z",
                                                   "limits": {"tpm": 500, "budget_period": "daily"}})
    assert r.status_code == 200, r.text
    again = models.Key.model_validate(r.json())
    assert (again.name, again.scopes, again.limits.rpm, again.limits.tpm, again.limits.budget,
            again.limits.budget_period) == ("svc 2", ["inference", "key:read"], 10, 500, "5.00", "daily")
    assert again.expires_at is not None and again.expires_at.startswith("2999-01-01")
    with client(gw, key["secret"]) as c:
        assert c.get("/v1/key").json()["limits"]["rpm"] == 10
        assert admin.delete(f"/v1/keys/{key['id']}").json()["revoked_at"]
        assert c.get("/v1/key").status_code == 401
    limited = admin.post("/v1/keys", json={"name": "capped", "limits": {"rpm": 7, "tpm": 700}}).json()
    assert (limited["limits"]["rpm"], limited["limits"]["tpm"]) == (7, 700)  # limits given at creation are kept
    nope = admin.delete("/v1/keys/key_nope")
    assert (nope.status_code, nope.json()["error"]["code"]) == (404, "key_not_found")


def test_patch_sets_a_policy_and_a_limits_patch_without_tpm_keeps_it(admin: httpx.Client) -> None:
    # caught by `make mutate`: a policy PATCH, and `tpm` left out of a limits PATCH
    key = admin.post("/v1/keys", json={"name": "svc", "limits": {"rpm": 5, "tpm": 900}}).json()
    assert key["policy"] is None
    r = admin.patch(f"/v1/keys/{key['id']}", json={"policy": "default", "limits": {"rpm": 6}})
    assert r.status_code == 200, r.text
    assert (r.json()["policy"], r.json()["limits"]["rpm"], r.json()["limits"]["tpm"]) == ("default", 6, 900)
    shown = admin.get(f"/v1/keys/{key['id']}").json()
    assert (shown["policy"], shown["limits"]["rpm"], shown["limits"]["tpm"]) == ("default", 6, 900)
    assert admin.patch(f"/v1/keys/{key['id']}", json={"policy": None}).json()["policy"] is None


def test_key_json_shows_policy_last_use_and_period_start(admin: httpx.Client) -> None:
    created = admin.post("/v1/keys", json={"name": "svc", "policy": "default",
                                           "limits": {"budget": "1.00", "budget_period": "daily"}}).json()
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    assert created["policy"] == "default" and created["last_used_at"] is None
    assert datetime.fromisoformat(created["spend"]["period_start"]) == today
    used = datetime(2030, 5, 6, 7, 8, 9, tzinfo=UTC)
    key = Key(id="key_1", workspace_id="ws_1", name="k", hint="sk-sw-ab", scopes=("inference",), models=None,
              policy="cheap", expires_at=None, created_at=used, last_used_at=used, revoked_at=None,
              period_start=datetime(2030, 5, 1, tzinfo=UTC))
    shown = accounts.key_out(key).model_dump(mode="json")
    assert (shown["policy"], shown["last_used_at"], shown["spend"]["period_start"]) == (
        "cheap", "2030-05-06T07:08:09+00:00", "2030-05-01T00:00:00+00:00")


@pytest.mark.parametrize(("body", "param"), [
    ({"name": "x", "scopes": ["everything"]}, "scopes.0"),
    ({"name": "x", "unknown": 1}, "unknown"),
    ({"name": ""}, "name"),
])
def test_bad_key_requests_name_the_field(admin: httpx.Client, body: dict, param: str) -> None:
    r = admin.post("/v1/keys", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


@pytest.mark.parametrize("at", ["0001-01-01T00:36:32+08:25", "9999-12-31T23:59:59-08:00"])
def test_an_expiry_that_is_no_time_in_utc_is_refused_by_name(admin: httpx.Client, at: str) -> None:
    """Schemathesis found these as 500s: one past datetime's range once in UTC."""
    created = admin.post("/v1/keys", json={"name": "x", "expires_at": at})
    key = admin.post("/v1/keys", json={"name": "y"}).json()
    patched = admin.patch(f"/v1/keys/{key['id']}", json={"expires_at": at})
    for r in (created, patched):
        assert r.status_code == 400 and r.json()["error"]["param"] == "expires_at", r.text
    assert admin.get(f"/v1/keys/{key['id']}").json()["expires_at"] is None
    offset = admin.post("/v1/keys", json={"name": "z", "expires_at": "2999-01-01T08:00:00+08:00"})
    assert offset.status_code == 201 and offset.json()["expires_at"].startswith("2999-01-01T00:00:00")


@pytest.mark.parametrize(("body", "param"), [
    ({"name": "x", "workspace_id": "ws_nope"}, None),
    ({"name": "x", "models": ["no/such"]}, "models.0"),
    ({"name": "x", "policy": "nope"}, "policy"),
])
def test_unknown_references_are_404(admin: httpx.Client, body: dict, param: str | None) -> None:
    r = admin.post("/v1/keys", json=body)
    assert r.status_code == 404, r.text
    assert r.json()["error"]["param"] == param


def test_admin_scope_is_required(gw: Live) -> None:
    secret = gw.create_key(scopes=("inference", "models:read", "key:read", "explain:read"))
    with client(gw, secret) as c:
        for method, path in (("GET", "/v1/workspaces"), ("GET", "/v1/keys"), ("DELETE", "/v1/keys/x")):
            r = c.request(method, path)
            assert r.status_code == 403 and "'admin'" in r.json()["error"]["message"]


def test_model_allowlist_limits_use_and_listing(gw: Live, admin: httpx.Client) -> None:
    secret = admin.post("/v1/keys", json={"name": "fast only", "models": ["fast"]}).json()["secret"]
    with client(gw, secret) as c:
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["acme/fast", "fast"]
        assert c.get("/v1/models/acme/strong").status_code == 404
        assert c.post("/v1/chat/completions", json={**CHAT, "model": "fast"}).json()["model"] == "acme/fast"
        r = c.post("/v1/chat/completions", json={**CHAT, "model": "acme/strong"})
        assert r.status_code == 403 and r.json()["error"]["code"] == "model_not_allowed"
        assert c.post("/v1/chat/completions", json={**CHAT, "model": "nope"}).status_code == 404


def _cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ}
    return subprocess.run([sys.executable, "-m", "handlers.cli", "--config", str(config), *args],
                          capture_output=True, text=True, env=env, timeout=60, check=False)


def test_cli_uses_the_same_logic(tmp_path: Path) -> None:
    config = tmp_path / "specway.yaml"
    config.write_text(f"store:\n  url: sqlite:///{tmp_path / 's.db'}\n")
    made = _cli(config, "keys", "create", "--name", "ci", "--scopes", "inference,models:read")
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("sk-sw-") and "\n" not in secret
    listed = _cli(config, "keys", "list")
    assert "ci" in listed.stdout and secret not in listed.stdout
    # The CLI validates through the API's generated models: the same bounds, the same messages.
    bad = _cli(config, "keys", "create", "--name", "x", "--scopes", "everything")
    assert bad.returncode == 2 and "scopes.0: Input should be 'inference'" in bad.stderr
    huge = _cli(config, "keys", "create", "--name", "x", "--rpm", str(10**19))
    assert huge.returncode == 2 and "limits.rpm: Input should be less than or equal to 2147483647" in huge.stderr
    zero = _cli(config, "keys", "create", "--name", "x", "--tpm", "0")
    assert zero.returncode == 2 and "--tpm: 0 would refuse every request" in zero.stderr
    assert "Traceback" not in _cli(config, "keys", "create", "--name", "x", "--expires-at", "soon").stderr
    ws_id = json.loads(_cli(config, "workspaces", "list", "--json").stdout)[0]["id"]
    credit = _cli(config, "workspaces", "credit", ws_id, "3.5")
    assert '"credit": "3.5"' in credit.stdout, credit.stderr
    negative = _cli(config, "workspaces", "credit", ws_id, "-5")
    assert negative.returncode == 2 and "would take the credit of" in negative.stderr and "it has 3.5" in negative.stderr
    key_id = listed.stdout.splitlines()[1].split("\t")[0]
    assert _cli(config, "keys", "revoke", key_id).stdout.strip() == f"revoked {key_id}"
    _cli(config, "keys", "create", "--name", "second")
    assert _cli(config, "workspaces", "revoke", ws_id).stdout.strip() == f"revoked {ws_id}"
    assert "revoked (workspace)" in _cli(config, "keys", "list").stdout
    refused = _cli(config, "keys", "create", "--name", "third")
    assert refused.returncode == 2 and "is revoked: it takes no new keys" in refused.stderr
    assert _cli(config, "workspaces", "restore", ws_id).stdout.strip() == f"restored {ws_id}"
    assert _cli(config, "keys", "create", "--name", "third").returncode == 0


def test_an_expired_key_is_401(gw: Live, admin: httpx.Client) -> None:
    key = admin.post("/v1/keys", json={"name": "old", "expires_at": "2000-01-01T00:00:00Z"}).json()
    assert key["expires_at"].startswith("2000-01-01")
    with client(gw, key["secret"]) as c:
        r = c.get("/v1/key")
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_revocation_elsewhere_takes_effect_within_the_cache_time(tmp_path: Path) -> None:
    with serve({**CONFIG, "server": {"key_cache_seconds": 1}}, tmp_path) as g:
        secret = g.create_key()
        key = g.run(g.gateway.store.key_by_secret(secret))
        with client(g, secret) as c:
            assert c.get("/v1/key").status_code == 200  # now cached in this process
            g.run(g.gateway.store.revoke_key(key.id))  # as another process would: straight in the store
            deadline = time.monotonic() + 4  # the bound set here (1 s) plus a margin, still under the 5 s default
            while c.get("/v1/key").status_code == 200:
                assert time.monotonic() < deadline, "a revoked key still worked after the cache time"
                time.sleep(0.1)


def test_a_revoked_workspace_stays_revoked_until_restored(gw: Live, admin: httpx.Client) -> None:
    """Its old keys, new keys and credit are refused; it is listed as revoked; only a restore reverses it."""
    ws = admin.post("/v1/workspaces", json={"name": "leaving", "credit": "5"}).json()
    assert (ws["state"], ws["revoked_at"]) == ("active", None)
    made = [admin.post("/v1/keys", json={"name": f"k{i}", "workspace_id": ws["id"]}).json() for i in range(2)]
    with client(gw, made[0]["secret"]) as c:
        assert c.get("/v1/key").status_code == 200  # cached in this process
    r = admin.delete(f"/v1/workspaces/{ws['id']}")
    assert r.status_code == 200 and r.json()["credit"] == "5" and r.json()["state"] == "revoked", r.text
    revoked_at = r.json()["revoked_at"]
    for key in made:
        with client(gw, key["secret"]) as c:
            refused = c.post("/v1/chat/completions", json=CHAT)
            assert refused.status_code == 401 and "workspace is revoked" in refused.json()["error"]["message"]
    listed = {w["id"]: w for w in admin.get("/v1/workspaces").json()["data"]}
    assert (listed[ws["id"]]["state"], listed[ws["id"]]["revoked_at"]) == ("revoked", revoked_at)
    assert admin.get(f"/v1/workspaces/{ws['id']}").json()["state"] == "revoked"
    new_key = admin.post("/v1/keys", json={"name": "after", "workspace_id": ws["id"]})
    assert new_key.status_code == 409 and new_key.json()["error"]["code"] == "workspace_revoked", new_key.text
    more = admin.post(f"/v1/workspaces/{ws['id']}/credit", json={"amount": "1"})
    assert more.status_code == 409 and more.json()["error"]["code"] == "workspace_revoked", more.text
    assert {k["name"] for k in admin.get("/v1/keys", params={"workspace_id": ws["id"]}).json()["data"]} == {"k0", "k1"}
    assert admin.delete(f"/v1/workspaces/{ws['id']}").json()["revoked_at"] == revoked_at  # the first time stays
    assert admin.delete(f"/v1/keys/{made[1]['id']}").status_code == 200  # revoked on its own meanwhile
    assert admin.get("/v1/key").status_code == 200  # the admin's own workspace is untouched
    assert admin.delete("/v1/workspaces/ws_nope").status_code == 404

    back = admin.post(f"/v1/workspaces/{ws['id']}/restore")
    assert back.status_code == 200 and (back.json()["state"], back.json()["revoked_at"]) == ("active", None)
    with client(gw, made[0]["secret"]) as c:
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200
    with client(gw, made[1]["secret"]) as c:
        assert c.get("/v1/key").status_code == 401  # revoked on its own: a restore does not bring it back
    assert admin.post(f"/v1/workspaces/{ws['id']}/credit", json={"amount": "1"}).json()["credit"] == "6"
    assert admin.post("/v1/keys", json={"name": "after", "workspace_id": ws["id"]}).status_code == 201
    assert admin.post(f"/v1/workspaces/{ws['id']}/restore").json()["state"] == "active"  # already active: no change
    assert admin.post("/v1/workspaces/ws_nope/restore").status_code == 404


def test_a_workspace_revoked_elsewhere_is_refused_within_the_cache_time(tmp_path: Path) -> None:
    """Another process (a replica, a worker, the CLI) revokes and restores in the store; this one's cached key
    learns of it within server.key_cache_seconds, because a key is read with its workspace's state."""
    with serve({**CONFIG, "server": {"key_cache_seconds": 1}}, tmp_path) as g:
        ws = g.new_workspace("elsewhere")
        secret = g.create_key(workspace_id=ws)
        with client(g, secret) as c:
            for revoked, before, status in ((True, 200, 401), (False, 401, 200)):
                assert c.get("/v1/key").status_code == before  # and the key is cached with that state
                g.run(g.gateway.store.set_workspace_revoked(ws, revoked))  # straight in the store
                deadline = time.monotonic() + 4  # the bound set here (1 s) plus a margin, under the 5 s default
                while c.get("/v1/key").status_code != status:
                    assert time.monotonic() < deadline, f"still not {status} after the cache time"
                    time.sleep(0.1)


def test_a_rotated_keys_old_secret_works_until_the_grace_ends(gw: Live, admin: httpx.Client) -> None:
    made = admin.post("/v1/keys", json={"name": "svc", "scopes": ["inference", "key:read"],
                                        "limits": {"budget": "5", "rpm": 100}}).json()
    with client(gw, made["secret"]) as old:
        assert old.post("/v1/chat/completions", json=CHAT).status_code == 200  # cached, and used
        before = old.get("/v1/key").json()
        assert (before["secret"], before["rotation"]) == ("current", None)
        r = admin.post(f"/v1/keys/{made['id']}/rotate", json={"grace_seconds": 2})
        assert r.status_code == 200, r.text
        rotated = r.json()
        assert rotated["secret"] != made["secret"] and rotated["secret"].startswith("sk-sw-")
        assert (rotated["id"], rotated["limits"], rotated["scopes"]) == (made["id"], made["limits"], made["scopes"])
        assert rotated["hint"] == rotated["secret"][:10] + "…" and rotated["rotation"]["previous_secret_expires_at"]
        told = old.get("/v1/key")  # the old secret, during the grace: it works, and says until when
        assert told.status_code == 200, told.text
        assert told.json()["secret"] == "previous"
        assert told.json()["rotation"] == rotated["rotation"] and told.json()["spend"] == rotated["spend"]
        with client(gw, rotated["secret"]) as new:
            assert new.post("/v1/chat/completions", json=CHAT).status_code == 200
            assert new.get("/v1/key").json()["secret"] == "current"
            deadline = time.monotonic() + 10
            while (answer := old.get("/v1/key")).status_code == 200:  # until the grace ends
                assert time.monotonic() < deadline, "the previous secret still worked long after its grace"
                time.sleep(0.2)
            assert answer.status_code == 401 and answer.json()["error"]["code"] == "invalid_api_key"
            assert new.get("/v1/key").json()["rotation"] is None  # the grace is over
            assert new.post("/v1/chat/completions", json=CHAT).status_code == 200
    listed = {k["id"]: k for k in admin.get("/v1/keys").json()["data"]}
    assert rotated["secret"] not in str(listed) and listed[made["id"]]["hint"] == rotated["hint"]


def test_a_rotation_without_grace_ends_the_old_secret_at_once(gw: Live, admin: httpx.Client) -> None:
    made = admin.post("/v1/keys", json={"name": "leaked"}).json()
    with client(gw, made["secret"]) as old:
        assert old.get("/v1/key").status_code == 200  # cached
        rotated = admin.post(f"/v1/keys/{made['id']}/rotate", json={"grace_seconds": 0}).json()
        assert rotated["rotation"] is None
        assert old.get("/v1/key").status_code == 401
    default = admin.post(f"/v1/keys/{made['id']}/rotate")  # no body: the default grace, a day
    assert default.status_code == 200, default.text
    expires = datetime.fromisoformat(default.json()["rotation"]["previous_secret_expires_at"])
    assert expires - datetime.fromisoformat(default.json()["rotation"]["rotated_at"]) == timedelta(days=1)
    with client(gw, rotated["secret"]) as previous:
        assert previous.get("/v1/key").json()["secret"] == "previous"
    for body, param in (({"grace_seconds": -1}, "grace_seconds"), ({"grace_seconds": 2592001}, "grace_seconds"),
                        ({"grace": "1h"}, "grace")):
        r = admin.post(f"/v1/keys/{made['id']}/rotate", json=body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert admin.post("/v1/keys/key_nope/rotate").status_code == 404


def test_the_cli_rotates_with_a_grace(tmp_path: Path) -> None:
    config = tmp_path / "specway.yaml"
    config.write_text(f"store:\n  url: sqlite:///{tmp_path / 's.db'}\n")
    secret = _cli(config, "keys", "create", "--name", "ci").stdout.strip()
    key_id = _cli(config, "keys", "list").stdout.splitlines()[1].split("\t")[0]
    rotated = _cli(config, "keys", "rotate", key_id, "--grace", "24h")
    assert rotated.returncode == 0, rotated.stderr
    new = rotated.stdout.strip()
    assert new.startswith("sk-sw-") and new != secret and "\n" not in new
    assert f"rotated {key_id}; its previous secret works until " in rotated.stderr
    shown = _cli(config, "keys", "show", key_id).stdout
    assert '"previous_secret_expires_at"' in shown and new not in shown and secret not in shown
    bad = _cli(config, "keys", "rotate", key_id, "--grace", "soon")
    assert bad.returncode == 2 and "'soon' is not a duration" in bad.stderr
    assert _cli(config, "keys", "rotate", key_id, "--grace", "0").returncode == 0


def test_changes_made_here_apply_at_once_to_keys_already_cached(tmp_path: Path) -> None:
    """README: a revoked key stops working "at once in the process that revoked it". Each key is used first, so it
    sits in this process's key cache, which here would otherwise trust it for five minutes."""
    with serve({**CONFIG, "server": {"key_cache_seconds": 300}}, tmp_path) as g, \
            httpx.Client(base_url=g.url, headers=g.headers, timeout=10) as admin:
        changed = admin.post("/v1/keys", json={"name": "changed"}).json()
        with client(g, changed["secret"]) as c:
            assert c.get("/v1/key").status_code == 200  # cached, with every scope
            assert admin.patch(f"/v1/keys/{changed['id']}", json={"scopes": ["inference"]}).status_code == 200
            r = c.get("/v1/key")
            assert r.status_code == 403 and r.json()["error"]["code"] == "insufficient_scope", r.text
            assert c.post("/v1/chat/completions", json=CHAT).status_code == 200

        ws = admin.post("/v1/workspaces", json={"name": "leaving"}).json()
        secrets = [admin.post("/v1/keys", json={"name": f"k{i}", "workspace_id": ws["id"]}).json()["secret"]
                   for i in range(2)]
        for secret in secrets:
            with client(g, secret) as c:
                assert c.get("/v1/key").status_code == 200  # cached
        assert admin.delete(f"/v1/workspaces/{ws['id']}").status_code == 200
        for secret in secrets:
            with client(g, secret) as c:
                r = c.get("/v1/key")
                assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", r.text
