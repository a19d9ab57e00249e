"""SDK conformance, the TypeScript SDKs: tests/sdk_ts/check.mjs drives the official openai and anthropic packages
against the same gateway and fake (fixtures in tests/sdk_support.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Live, tool, unavailable
from tests.fake_upstream import FakeUpstream
from tests.sdk_support import (
    CATALOG,
    MODEL,
    PREFIX,
    UPSTREAM_MODEL,
    UPSTREAM_PATH,
    USAGE,
    expected_usage,
    fixture_clients,  # noqa: F401  (a fixture)
    fixture_fake,  # noqa: F401  (a fixture)
    fixture_fresh,  # noqa: F401  (a fixture)
    fixture_live,  # noqa: F401  (a fixture)
)

TS_DIR = Path(__file__).parent / "sdk_ts"


@pytest.fixture(scope="module")
def ts_sdks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/sdk_ts installed with `npm ci` (from its lockfile) in a temporary copy."""
    tool("node")
    npm = tool("npm")
    work = tmp_path_factory.mktemp("sdk_ts")
    for name in ("package.json", "package-lock.json", "check.mjs"):
        shutil.copy(TS_DIR / name, work / name)
    command = [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline"]
    proc = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        message = f"npm ci failed in {work}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        unavailable(message)
    return work


TS_STEPS = [  # (name in check.mjs's output, format, upstream kind, streamed)
    ("chat", "chat", "openai", False),
    ("chatStream", "chat", "anthropic", True),
    ("responses", "responses", "anthropic", False),
    ("responsesStream", "responses", "openai", True),
    ("messages", "messages", "openai", False),
    ("messagesStream", "messages", "anthropic", True),
]


def test_typescript_sdks(ts_sdks: Path, live: Live, fake: FakeUpstream) -> None:
    for n, _ in enumerate(TS_STEPS):
        fake.script(text=f"TypeScript reply number {n}.", usage=USAGE)
    fake.script(text=" ".join(f"w{i}" for i in range(12)), fail_after=4, error="ts chat broke")
    fake.script(text=" ".join(f"w{i}" for i in range(12)), fail_after=4, error="ts messages broke")
    env = {**os.environ, "SPECWAY_URL": live.url, "SPECWAY_KEY": live.key}
    proc = subprocess.run([shutil.which("node") or "node", "check.mjs"], cwd=ts_sdks, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    for n, (name, fmt, kind, _) in enumerate(TS_STEPS):
        got = out[name]
        assert got["text"] == f"TypeScript reply number {n}.", (name, got)
        assert got["model"] == MODEL[kind] and got["id"].startswith(PREFIX[fmt]), (name, got)
        assert got["usage"] == expected_usage(fmt, kind), (name, got)
        if "deltas" in got:
            assert got["deltas"] == got["text"], (name, got)
    assert [(r.path, r.body["model"], bool(r.body.get("stream"))) for r in fake.requests[: len(TS_STEPS)]] == [
        (UPSTREAM_PATH[kind], UPSTREAM_MODEL[kind], stream) for _, _, kind, stream in TS_STEPS
    ]
    assert "ts chat broke" in out["chatBroken"], out["chatBroken"]
    assert "ts messages broke" in out["messagesBroken"], out["messagesBroken"]
    assert out["badKey"] == 401
    assert out["xKeySent"] and all(h == {"authorization": False, "xApiKey": True} for h in out["xKeySent"])
    assert out["openaiModels"] == CATALOG and out["anthropicModels"] == CATALOG
