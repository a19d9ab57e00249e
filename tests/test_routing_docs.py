"""docs/routing.md, run as written: each `<!-- routing-doc: NAME-config -->` YAML block is a `specway.yaml`, served by
`specway serve` in a folder of its own, and the shell block marked `<!-- routing-doc: NAME -->` runs against it with
bash (errexit, pipefail). A line of the block that starts with `# ` is output the reader is shown: it must appear in
what the block printed (case and surrounding blanks aside), so an example whose answer changed fails here.

What is changed, and only that: 127.0.0.1:8080 becomes a free port, $RELAY_KEY is the key the gateway printed, and
the `specway` command is this environment's.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port, spawn, stop

DOC = Path(__file__).resolve().parents[1] / "docs" / "routing.md"
BIN = Path(sys.executable).parent  # where `specway` is installed
_BLOCK = re.compile(r"<!-- routing-doc: ([\w-]+) -->\n```\w+\n(.*?)```", re.DOTALL)


def blocks() -> dict[str, str]:
    return dict(_BLOCK.findall(DOC.read_text(encoding="utf-8")))


def examples() -> list[str]:
    found = blocks()
    return sorted(name for name in found if not name.endswith("-config") and f"{name}-config" in found)


def test_every_example_has_its_configuration() -> None:
    found = blocks()
    assert examples(), "docs/routing.md has no runnable example"
    assert {n for n in found if not n.endswith("-config")} == set(examples())


@pytest.mark.parametrize("name", examples())
def test_the_example_runs_as_written(name: str, tmp_path: Path) -> None:
    found = blocks()
    config = found[f"{name}-config"] + f"\nstore: {{url: 'sqlite:///{tmp_path / 'specway.db'}'}}\n"
    (tmp_path / "specway.yaml").write_text(config)
    port = free_port()
    proc, key = spawn(tmp_path / "specway.yaml", port, tmp_path / "serve.log")
    try:
        script = found[name].replace("127.0.0.1:8080", f"127.0.0.1:{port}")
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, "RELAY_KEY": key, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
                              timeout=120, check=False)
    finally:
        stop(proc)
    assert done.returncode == 0, done.stdout + done.stderr
    printed = [line.strip().lower() for line in done.stdout.splitlines()]
    for shown in (line[2:].strip().lower() for line in script.splitlines() if line.startswith("# ")):
        assert any(shown in line for line in printed), f"{shown!r} is not in what the example printed:\n{done.stdout}"
