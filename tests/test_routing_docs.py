"""docs/routing.md, run as written: each `<!-- test: route-NAME-config -->` YAML block is a `specway.yaml`, served by
`specway serve` in a folder of its own, and the shell block marked `<!-- test: route-NAME -->` runs against it with
bash (errexit, pipefail). The blocks that show a shape (`route-shape-...`: a configuration, a part of a decision
record) are a valid configuration, or JSON the spec's schema for it accepts. A line of the block that starts with `# ` is output the reader is shown: it must appear in
what the block printed (case and surrounding blanks aside), so an example whose answer changed fails here.

What is changed, and only that: 127.0.0.1:8080 becomes a free port, $RELAY_KEY is the key the gateway printed, and
the `specway` command is this environment's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from generated import models
from handlers import config as config_mod
from tests.conftest import free_port, spawn, stop
from tests.docs_support import blocks as doc_blocks

SHAPES = {"route-shape-one-upstream", "route-shape-deployments", "route-shape-retries", "route-shape-affinity",
          "route-shape-candidate"}
BIN = Path(sys.executable).parent  # where `specway` is installed


def blocks() -> dict[str, str]:
    """docs/routing.md's examples, by their names without `route-` (the shapes are apart)."""
    return {name.removeprefix("route-"): b.text for name, b in doc_blocks().items()
            if name.startswith("route-") and name not in SHAPES}


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


def run_names() -> set[str]:
    """Every block of docs/routing.md this module runs (tests/test_readme.py checks that none is left out)."""
    return {f"route-{name}" for name in blocks()} | SHAPES


@pytest.mark.parametrize("name", sorted(n for n in SHAPES if n != "route-shape-affinity" and
                                        n != "route-shape-candidate"))
def test_the_configuration_shown_is_valid(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.setenv(variable, "a-key")
    shown = yaml.safe_load(doc_blocks()[name].text)
    if "upstreams" not in shown:  # a section of the configuration, alone
        shown |= {"upstreams": {"local": {"kind": "echo"}}, "models": [{"id": "m", "upstream": "local", "name": "m"}]}
    config_mod.parse(shown, f"docs/routing.md ({name})")


def test_the_record_parts_shown_are_the_specs() -> None:
    affinity = json.loads(doc_blocks()["route-shape-affinity"].text)["affinity"]
    models.DecisionAffinity.model_validate(affinity)
    models.DecisionCandidate.model_validate(json.loads(doc_blocks()["route-shape-candidate"].text))
