"""The console's bundle is built output, checked for drift like generated/: console/ installed with `npm ci` from its
lockfile in a temporary copy, built against this checkout's openapi.json (openapi-typescript's types, tsc strict,
esbuild), must give handlers/console/assets/console.js byte for byte. A spec change that breaks a call the console
makes fails here, at tsc; a source change without `make console` fails at the comparison."""

from __future__ import annotations

import difflib
import shutil
import subprocess
from pathlib import Path

from tests.conftest import tool, unavailable

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "console"
BUILT = ROOT / "handlers" / "console" / "assets" / "console.js"


def test_the_committed_bundle_is_what_the_sources_build(tmp_path: Path) -> None:
    node, npm = tool("node"), tool("npm")
    work = tmp_path / "console"
    shutil.copytree(SOURCE, work, ignore=shutil.ignore_patterns("node_modules", "schema.d.ts"))
    command = [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts", "--prefer-offline"]
    proc = subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        unavailable(f"npm ci failed in {work}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    out = tmp_path / "console.js"
    build = subprocess.run([node, "build.mjs", "--spec", str(ROOT / "openapi.json"), "--out", str(out)], cwd=work,
                           capture_output=True, text=True, timeout=300, check=False)
    assert build.returncode == 0, f"the console does not build:\n{build.stdout[-4000:]}{build.stderr[-4000:]}"
    fresh, committed = out.read_text(encoding="utf-8"), BUILT.read_text(encoding="utf-8")
    diff = "".join(difflib.unified_diff(committed.splitlines(keepends=True), fresh.splitlines(keepends=True),
                                        "console.js (committed)", "console.js (from console/src)", n=1))
    assert fresh == committed, f"the console bundle is stale: run `make console`\n{diff[:4000]}"
