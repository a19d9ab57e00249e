"""bench.soak at a reduced size: one gateway (SQLite) under priced and streamed load, window after window; its RSS
must level off (over the last half of the windows, the median window's growth per request within bench.soak's
bound). The full size is run by hand (bench/README.md, "Soak"). No wall-clock assertions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.soak import MB, Window, growth_per_request

REPO = Path(__file__).resolve().parent.parent
SCENARIOS = ("priced-sqlite", "stream")


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("soak") / "soak.json"
    cmd = [sys.executable, "-m", "bench.soak", "--scenarios", ",".join(SCENARIOS), "--conns", "16", "--windows", "6",
           "--window", "3", "--warmup", "3", "--loadgen", "builtin", "--json", str(out)]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert out.exists(), f"bench.soak wrote no result ({run.returncode}):\n{run.stdout}\n{run.stderr[-3000:]}"
    doc: dict[str, Any] = json.loads(out.read_text())
    doc["returncode"], doc["output"] = run.returncode, run.stdout
    return doc


def test_memory_levels_off_under_load(result: dict[str, Any]) -> None:
    assert set(result["scenarios"]) == set(SCENARIOS)
    for name, scenario in result["scenarios"].items():
        windows = scenario["windows"]
        assert len(windows) == 6 and all(w["requests"] > 0 and w["errors"] == 0 for w in windows), (name, windows)
        assert scenario["holds"] and scenario["bytes_per_request"] <= result["limit"], (name, result["output"])
    assert result["returncode"] == 0, result["output"]


def test_the_verdict_tells_a_leak_from_a_warm_up() -> None:
    """A gateway keeping 1 KB of every request fails; one that grew early, or in one step late, and then stopped
    holds."""
    leaking = [Window(1000, 0, 100 + n * 1000 * 1024 / MB) for n in range(6)]
    warming = [Window(1000, 0, rss) for rss in (100, 120, 130, 130.1, 130.15, 130.15)]
    stepping = [Window(1000, 0, rss) for rss in (100, 100, 100, 100, 103, 103)]
    assert growth_per_request(leaking) == pytest.approx(1024)
    assert growth_per_request(warming) == pytest.approx(0.05 * MB / 1000)  # 52 bytes
    assert growth_per_request(stepping) == 0
    assert growth_per_request([Window(1000, 0, 100), Window(1000, 0, 90)]) == 0
    with pytest.raises(ValueError):
        growth_per_request([Window(1000, 0, 100)])
