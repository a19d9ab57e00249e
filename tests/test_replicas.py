"""Two `specway serve` replicas behind nginx (docs/nginx.conf as it is), sharing PostgreSQL and Redis; and the
commands of docs/operations.md (db upgrade, the key and workspace CLI on PostgreSQL, backups of both stores).

Which replica served a request is read from nginx's own access log ($upstream_addr), keyed by the X-Request-Id
every request carries.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import anthropic
import asyncpg
import httpx
import openai
import pytest
import yaml

from handlers.store import PostgresStore, migrations, open_store
from handlers.store.base import SCOPES
from tests.conftest import free_port, fresh_postgres, spawn, stop, tool
from tests.fake_upstream import FakeUpstream
from tests.test_metering import USER, WORST, gateway_config, held, key_info, make_key

NGINX_SITE = Path(__file__).resolve().parents[1] / "docs" / "nginx.conf"
REDIS_URL = "redis://127.0.0.1:6379/0"
MODEL = "acme/paid"


@dataclass
class Cluster:
    url: str  # nginx
    replicas: dict[str, str]  # host:port as nginx logs it -> base URL
    admin: str
    fake: FakeUpstream
    access_log: Path
    logs: list[Path]

    def served_by(self, request_ids: set[str], timeout: float = 5) -> dict[str, tuple[str, int]]:
        """request id -> (the replica nginx sent it to, the status nginx answered), from nginx's access log."""
        deadline = time.monotonic() + timeout
        while True:
            seen: dict[str, tuple[str, int]] = {}
            for line in self.access_log.read_text().splitlines():
                rid, addr, status = line.split()
                if rid in request_ids:
                    seen[rid] = (addr, int(status))
            if len(seen) == len(request_ids) or time.monotonic() > deadline:
                assert set(seen) == request_ids, f"nginx did not log {request_ids - set(seen)}"
                return seen
            time.sleep(0.05)


def nginx_config(prefix: Path, port: int, replica_ports: list[int]) -> Path:
    """A main nginx.conf whose http block includes docs/nginx.conf with only its addresses replaced."""
    site = NGINX_SITE.read_text()
    for old, new in (("listen 80;", f"listen 127.0.0.1:{port};"),
                     ("server 127.0.0.1:8081;", f"server 127.0.0.1:{replica_ports[0]};"),
                     ("server 127.0.0.1:8082;", f"server 127.0.0.1:{replica_ports[1]};")):
        assert site.count(old) == 1, f"docs/nginx.conf no longer holds {old!r} once"
        site = site.replace(old, new)
    (prefix / "specway.conf").write_text(site)
    temp_paths = "\n".join(f"    {kind}_temp_path {prefix / kind};" for kind in
                           ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    main = prefix / "nginx.conf"
    main.write_text(f"""{"user root;" if os.geteuid() == 0 else ""}
worker_processes 1;
pid {prefix / "nginx.pid"};
error_log {prefix / "error.log"} warn;
events {{ worker_connections 1024; }}
http {{
{temp_paths}
    log_format replicas '$specway_request_id $upstream_addr $status';
    access_log {prefix / "access.log"} replicas;
    include {prefix / "specway.conf"};
}}
""")
    return main


def start_nginx(stack: ExitStack, tmp: Path, replica_ports: list[int]) -> tuple[str, Path]:
    nginx = tool("nginx")
    prefix = tmp / "nginx"
    prefix.mkdir()
    port = free_port()
    conf = nginx_config(prefix, port, replica_ports)
    args = [nginx, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
    checked = subprocess.run([*args, "-t"], capture_output=True, text=True, timeout=30, check=False)
    assert checked.returncode == 0, checked.stderr
    stderr = stack.enter_context((prefix / "stderr.log").open("w"))
    proc = subprocess.Popen([*args, "-g", "daemon off;"], stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    stack.callback(stop, proc)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return url, prefix / "access.log"
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"nginx did not start:\n{(prefix / 'error.log').read_text()}")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tool("nginx")  # before starting anything
    tmp = tmp_path_factory.mktemp("replicas")
    with ExitStack() as stack:
        fake = stack.enter_context(FakeUpstream())
        store_url = stack.enter_context(fresh_postgres())
        config = tmp / "specway.yaml"
        config.write_text(yaml.safe_dump(gateway_config(fake, store_url, limits={"redis_url": REDIS_URL})))
        ports, logs, admin = [free_port(), free_port()], [tmp / "replica1.log", tmp / "replica2.log"], ""
        # Replica 1 first: it migrates the fresh database and prints the first key. Replica 2 runs two workers.
        for port, log, extra in zip(ports, logs, [(), ("--workers", "2")], strict=True):
            proc, key = spawn(config, port, log, *extra)
            stack.callback(stop, proc)
            admin = admin or key
        assert admin.startswith("sk-sw-")
        url, access_log = start_nginx(stack, tmp, ports)
        replicas = {f"127.0.0.1:{p}": f"http://127.0.0.1:{p}" for p in ports}
        yield Cluster(url, replicas, admin, fake, access_log, logs)


def new_key(cluster: Cluster, **key: Any) -> str:
    cluster.fake.reset()
    return make_key(cluster.url, cluster.admin, "1000", **key)  # the admin API, through nginx


async def chat_burst(url: str, key: str, n: int, fake: FakeUpstream | None = None
                     ) -> list[tuple[str, int, Any, str | None]]:
    """n concurrent chat completions through the OpenAI SDK (no retries): (request id, status, headers, error code);
    with `fake`, held there until all n are in (tests.test_metering.held)."""
    tag = uuid.uuid4().hex[:12]

    async def one(client: openai.AsyncOpenAI, i: int) -> tuple[str, int, Any, str | None]:
        rid = f"{tag}-{i}"
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL, messages=USER, max_tokens=100, extra_headers={"X-Request-Id": rid})  # type: ignore[arg-type]
            assert raw.parse().choices[0].message.content
            return rid, raw.status_code, raw.headers, None
        except openai.APIStatusError as exc:
            return rid, exc.status_code, exc.response.headers, exc.code

    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=180) as client:
        calls = [one(client, i) for i in range(n)]
        return await held(fake, calls) if fake else list(await asyncio.gather(*calls))


def per_replica(cluster: Cluster, results: list[tuple[str, int, Any, str | None]]) -> dict[str, Counter[int]]:
    """Statuses by the replica that answered, checked against what the callers saw."""
    served = cluster.served_by({rid for rid, *_ in results})
    assert {rid: status for rid, status, *_ in results} == {rid: status for rid, (_, status) in served.items()}
    for rid, _, headers, _ in results:
        assert headers["x-request-id"] == rid  # X-Request-Id reached Specway and came back
    counts: dict[str, Counter[int]] = {addr: Counter() for addr in cluster.replicas}
    for addr, status in served.values():
        counts[addr][status] += 1
    return counts


def test_one_rate_limit_across_replicas(cluster: Cluster) -> None:
    key = new_key(cluster, limits={"rpm": 30})
    results = asyncio.run(chat_burst(cluster.url, key, 50))
    assert Counter(status for _, status, *_ in results) == {200: 30, 429: 20}
    for _, status, headers, code in results:
        assert headers["x-ratelimit-limit-requests"] == "30"
        if status == 429:
            assert code == "rate_limit_exceeded" and 1 <= int(headers["retry-after"]) <= 60
    # Each replica received fewer than 30 requests, so a limit counted per process would have passed them all;
    # the 20 refusals come from one count that both replicas (three processes) draw on.
    for addr, counts in per_replica(cluster, results).items():
        assert 0 < counts.total() < 30 and counts[200] > 0, (addr, counts)


def test_one_budget_across_replicas_is_never_exceeded(cluster: Cluster) -> None:
    paid_for = WORST * 10
    key = new_key(cluster, limits={"budget": str(paid_for)})
    try:  # the fake upstream holds every request until all 50 have reserved or been refused
        results = asyncio.run(chat_burst(cluster.url, key, 50, cluster.fake))
    finally:
        cluster.fake.reset()
    assert Counter(status for _, status, *_ in results) == {200: 10, 402: 40}
    assert {code for _, status, _, code in results if status == 402} == {"budget_exceeded"}
    # Each replica received more than the 10 requests the budget pays for: alone, each could have spent it all.
    for addr, counts in per_replica(cluster, results).items():
        assert counts.total() > 10, (addr, counts)
    for url in [cluster.url, *cluster.replicas.values()]:
        spend = key_info(url, key)["spend"]
        assert Decimal(0) < Decimal(spend["total"]) <= paid_for and Decimal(spend["reserved"]) == 0


def test_every_decision_is_readable_through_either_replica(cluster: Cluster) -> None:
    key = new_key(cluster)
    oai = openai.OpenAI(base_url=f"{cluster.url}/v1", api_key=key, max_retries=0)
    ant = anthropic.Anthropic(base_url=cluster.url, api_key=key, max_retries=0)
    made: dict[str, str] = {}  # decision id -> request id
    for i in range(3):
        rid = f"explain-{uuid.uuid4().hex[:12]}"
        chat = oai.chat.completions.with_raw_response.create(
            model=MODEL, messages=USER, max_tokens=100, extra_headers={"X-Request-Id": rid})  # type: ignore[arg-type]
        made[chat.headers["x-specway-decision-id"]] = rid
        assert chat.parse().id == f"chatcmpl-{chat.headers['x-specway-decision-id']}"
        rid = f"explain-{uuid.uuid4().hex[:12]}"
        msg = ant.messages.with_raw_response.create(
            model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}], extra_headers={"X-Request-Id": rid})
        made[msg.headers["x-specway-decision-id"]] = rid
        assert msg.parse().id == f"msg_{msg.headers['x-specway-decision-id']}"
    served = cluster.served_by(set(made.values()))
    assert {addr for addr, _ in served.values()} == set(cluster.replicas)  # both replicas made some of them
    deadline = time.monotonic() + 10  # the record writer flushes every 0.25 s; a busy machine may lag far behind
    for decision, rid in made.items():
        for url in cluster.replicas.values():
            while True:
                r = httpx.get(f"{url}/v1/route/explain/{decision}", headers={"Authorization": f"Bearer {key}"})
                if r.status_code != 404 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert r.status_code == 200, (served[rid], url, r.text)
            record = r.json()
            assert (record["id"], record["model"], record["outcome"]) == (decision, MODEL, "ok")


WORDS = "one two three four five six seven eight"


def test_streams_pass_through_nginx_unbuffered(cluster: Cluster) -> None:
    key = new_key(cluster)
    cluster.fake.script(text=WORDS, chunk_delay=0.1)
    oai = openai.OpenAI(base_url=f"{cluster.url}/v1", api_key=key, max_retries=0)
    first = 0.0
    with oai.chat.completions.stream(model=MODEL, messages=USER, max_tokens=100) as stream:  # type: ignore[arg-type]
        for event in stream:
            if event.type == "content.delta" and not first:
                first = time.monotonic()
        completion = stream.get_final_completion()
    # About ten chunks 0.1 s apart: the first word reached the caller long before the last one was written.
    assert completion.choices[0].message.content == WORDS and time.monotonic() - first > 0.5

    cluster.fake.script(text=WORDS, chunk_delay=0.1)
    ant = anthropic.Anthropic(base_url=cluster.url, api_key=key, max_retries=0)
    first = 0.0
    with ant.messages.stream(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}]) as events:
        for ev in events:
            if ev.type == "text" and not first:
                first = time.monotonic()
        message = events.get_final_message()
    assert message.content[0].type == "text" and message.content[0].text == WORDS
    assert message.stop_reason == "end_turn" and time.monotonic() - first > 0.5


def test_health_and_request_ids_through_nginx(cluster: Cluster) -> None:
    ready = httpx.get(f"{cluster.url}/readyz")
    assert ready.json() == {"status": "ok", "checks": {"store": "ok", "limits": "ok"}}
    assert httpx.get(f"{cluster.url}/metrics").status_code == 403  # scraped per replica, not through nginx
    for url in cluster.replicas.values():
        assert "specway_requests_total" in httpx.get(f"{url}/metrics").text
    # Over client_max_body_size (= server.body_limit_bytes) nginx refuses with its own page, before any replica.
    big = httpx.post(f"{cluster.url}/v1/chat/completions", content=b"x" * (10 * 1024 * 1024 + 1))
    assert big.status_code == 413 and big.headers["content-type"].startswith("text/html")
    # No X-Request-Id from the caller: nginx sends its own $request_id, and Specway answers and logs that id.
    r = httpx.get(f"{cluster.url}/healthz")
    rid = r.headers["x-request-id"]
    assert r.json() == {"status": "ok"} and re.fullmatch(r"[0-9a-f]{32}", rid)
    addr, _ = cluster.served_by({rid})[rid]
    log = cluster.logs[list(cluster.replicas).index(addr)]
    deadline = time.monotonic() + 5
    while f'"request_id":"{rid}"' not in log.read_text():
        assert time.monotonic() < deadline, f"{addr} did not log request {rid}"
        time.sleep(0.05)


# --- the commands of docs/operations.md -------------------------------------------------------------------------


def specway(*args: str, config: Path | None = None) -> str:
    """`specway ARGS`, with the config in $SPECWAY_CONFIG when given; its stdout."""
    env = {**os.environ, "SPECWAY_CONFIG": str(config)} if config else {**os.environ}
    done = subprocess.run([sys.executable, "-m", "handlers.cli", *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def run(*args: str, cwd: Path | None = None) -> None:
    done = subprocess.run(list(args), capture_output=True, text=True, cwd=cwd, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_postgresql_upgrade_cli_and_pg_dump_restore(tmp_path: Path) -> None:
    pg_dump, pg_restore = tool("pg_dump"), tool("pg_restore")
    with fresh_postgres() as url, fresh_postgres() as restored_url:
        async def at_version_1() -> str:
            store = PostgresStore(url)
            await store.open(target=1)  # a database as an older Specway left it
            try:
                _, secret = await store.create_key((await store.create_workspace("kept")).id, "kept-key", SCOPES)
                return str(secret)
            finally:
                await store.close()

        kept = asyncio.run(at_version_1())
        config = tmp_path / "specway.yaml"
        config.write_text(yaml.safe_dump({"store": {"url": url}}))
        assert specway("--config", str(config), "db", "upgrade") == "database schema is up to date\n"
        assert asyncio.run(versions(url)) == [m.version for m in migrations.load("postgresql")]

        # The guide's key and workspace commands, on PostgreSQL; `keys list` reads $SPECWAY_CONFIG.
        cli = ("--config", str(config))
        ws = json.loads(specway(*cli, "workspaces", "create", "--name", "team-a", "--credit", "25.00"))
        assert ws["credit"] == "25.00"
        secret = specway(*cli, "keys", "create", "--name", "ci", "--workspace", ws["id"],
                         "--scopes", "inference,models:read", "--rpm", "60", "--budget", "5").strip()
        assert secret.startswith("sk-sw-")
        rows = [row.split("\t") for row in specway("keys", "list", config=config).splitlines()[1:]]
        assert sorted(name for _, name, *_ in rows) == ["ci", "kept-key"]
        key_id = next(row[0] for row in rows if row[1] == "ci")
        updated = json.loads(specway(*cli, "keys", "update", key_id, "--scopes", "inference,key:read"))
        assert updated["scopes"] == ["inference", "key:read"] and updated["limits"]["rpm"] == 60
        assert json.loads(specway(*cli, "workspaces", "credit", ws["id"], "10"))["credit"] == "35.00"
        assert [w["name"] for w in json.loads(specway(*cli, "workspaces", "list"))] == ["kept", "team-a"]

        dump = tmp_path / "specway.dump"
        run(pg_dump, "--format=custom", f"--file={dump}", url)
        assert specway(*cli, "keys", "revoke", key_id) == f"revoked {key_id}\n"  # after the dump
        run(pg_restore, "--no-owner", f"--dbname={restored_url}", str(dump))
        restored = tmp_path / "restored.yaml"
        restored.write_text(yaml.safe_dump({"store": {"url": restored_url}}))
        assert specway("--config", str(restored), "db", "upgrade") == "database schema is up to date\n"
        assert_usable(restored_url, kept)
        assert_usable(restored_url, secret)  # revoked after the dump: the restored database has it active


async def versions(url: str) -> list[int]:
    conn = await asyncpg.connect(url)
    try:
        return [r[0] for r in await conn.fetch("SELECT version FROM schema_version ORDER BY version")]
    finally:
        await conn.close()


def assert_usable(store_url: str, secret: str) -> None:
    async def check() -> None:
        store = open_store(store_url)
        await store.open()
        try:
            key = await store.key_by_secret(secret)
            assert key is not None and key.revoked_at is None
        finally:
            await store.close()

    asyncio.run(check())


SQLITE_BACKUPS = {
    "sqlite3 CLI": ["sqlite3", "specway.db", ".backup backup.db"],
    "python": [sys.executable, "-c", "import sqlite3; sqlite3.connect('specway.db').backup(sqlite3.connect('backup.db'))"],
}


@pytest.mark.parametrize("how", list(SQLITE_BACKUPS))
def test_sqlite_online_backup_is_a_usable_store(tmp_path: Path, how: str) -> None:
    command = SQLITE_BACKUPS[how]
    if how == "sqlite3 CLI":
        tool("sqlite3")

    async def backup_while_open() -> str:
        store = open_store(f"sqlite:///{tmp_path / 'specway.db'}")
        await store.open()
        try:
            _, secret = await store.create_key((await store.create_workspace("w")).id, "backup-me", SCOPES)
            assert (tmp_path / "specway.db-wal").stat().st_size > 0  # the new key is still in the write-ahead log
            run(*command, cwd=tmp_path)
            return str(secret)
        finally:
            await store.close()

    secret = asyncio.run(backup_while_open())
    assert_usable(f"sqlite:///{tmp_path / 'backup.db'}", secret)
