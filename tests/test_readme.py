"""The README, run as written, the way a newcomer follows it: `make run`, the quickstart, real providers, the SDKs,
serving a team. tests/docs_support.py says what is changed in a block (the port, the placeholder key and ids, the
providers' addresses) and how it is run; tests/test_docs.py runs the blocks of docs/.

Every fenced block of the README and docs/ is marked `<!-- test: NAME -->`, and each name is run here, in
tests/test_docs.py, or by the test named in ELSEWHERE, which needs a setup of its own.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import httpx
import pytest

from tests import test_docs, test_routing_docs
from tests.docs_support import ROOT, VENV_BIN, Terminal, blocks, commands, unmarked
from tests.fake_upstream import FakeUpstream

# Blocks run by a test with a setup of its own (the agents' CLIs, the client generators and npm).
ELSEWHERE = {
    "claude-code": "test_coding_agents.py", "codex-config": "test_coding_agents.py",
    "codex-offline": "test_coding_agents.py", "codex-catalog": "test_coding_agents.py",
    "generated-python-generate": "test_generated_clients.py", "generated-python": "test_generated_clients.py",
    "generated-ts-generate": "test_generated_clients.py", "generated-ts": "test_generated_clients.py",
    "gemini-sdk": "test_sdk_gemini_google.py",
    # a Docker daemon, systemd, a cluster: what these name is checked against the files (the image is built and run
    # with buildah by test_container.py)
    "docker-build": "test_deploy.py", "docker-build-secrets": "test_deploy.py", "compose-up": "test_deploy.py",
    "systemd": "test_deploy.py", "kubernetes": "test_deploy.py",
}
RUN = {"two-commands", "first-key", "quickstart", "quickstart-formats", "real-providers", "credit", "sdk",
       "serve-team", "team-keys"}
FIRST_KEY = re.compile(r"sk-sw-[A-Za-z0-9_-]{43}")


def test_every_block_is_marked_and_run() -> None:
    assert unmarked() == [], "fenced blocks without a `<!-- test: NAME -->` line before them"
    assert set(blocks()) == RUN | test_docs.RUN | test_routing_docs.run_names() | set(ELSEWHERE)
    for name, test in ELSEWHERE.items():
        assert f'"{name}"' in (ROOT / "tests" / test).read_text(encoding="utf-8"), f"{test} does not run {name}"


def test_the_readme_begins_with_a_streamed_answer() -> None:
    """A newcomer's first 40 lines: what it is, the two commands, and a streamed request."""
    head = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:40])
    assert "make run" in head and '"stream":true' in head and "## Quickstart" in head


def project(folder: Path) -> Terminal:
    """A clone as `make run` leaves it: the Makefile and pyproject.toml, and .venv installed (the project's venv,
    linked entry by entry, with the Makefile's stamp newer than pyproject.toml, so nothing is installed again)."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, folder / name)
    venv = folder / ".venv"
    venv.mkdir()
    for entry in VENV_BIN.parent.iterdir():
        if not entry.name.startswith("."):
            (venv / entry.name).symlink_to(entry)
    (venv / ".runtime").touch()
    return Terminal(folder)


@pytest.fixture
def term(tmp_path: Path) -> Terminal:
    return project(tmp_path)


def test_the_readme_runs_as_written(term: Terminal) -> None:
    found = blocks()
    # Two commands: `make run` serves the quickstart below; `make test` is what CI runs (.ci/run), whole.
    assert [c.split("#")[0].strip() for c in commands(found["two-commands"].text)] == ["make run", "make test"]
    assert re.search(r"^make test\b", (ROOT / ".ci" / "run").read_text(), re.MULTILINE)
    with term.serving("make run") as printed:
        notice, shown = found["first-key"].text.splitlines()
        assert FIRST_KEY.fullmatch(printed) and shown == "sk-sw-...", printed
        assert notice in term.log()
        term.key = printed
        streamed = term.sh(found["quickstart"].text)
        assert '"object":"chat.completion.chunk"' in streamed and streamed.rstrip().endswith("data: [DONE]")
        both = term.sh(found["quickstart-formats"].text)
        assert '"type":"message"' in both and '"object":"response"' in both and '"type":"error"' not in both

    # Real providers: the README's specway.yaml, its providers replaced by local servers of their kinds.
    (term.folder / "specway.yaml").write_text(found["real-providers"].text)
    with FakeUpstream() as fake:
        term.env |= {"SPECWAY_UPSTREAMS__OPENAI__BASE_URL": fake.url,
                     "SPECWAY_UPSTREAMS__ANTHROPIC__BASE_URL": fake.anthropic_url}
        term.sh(found["credit"].text)  # step 2: the providers' keys exported, the default workspace credited
        assert term.env["OPENAI_API_KEY"] and term.env["ANTHROPIC_API_KEY"] and term.ids["ws_..."]
        with term.serving("make run") as printed:  # step 3: the same key works
            assert printed == ""
            headers = {"Authorization": f"Bearer {term.key}"}
            chat = f"{term.url}/v1/chat/completions"
            fast = httpx.post(chat, headers=headers, json={"messages": [{"role": "user", "content": "hi"}]})
            strong = httpx.post(chat, headers=headers, json={"messages": [{"role": "user", "content": "hi"}],
                                                             "reasoning_effort": "high"})
            assert (fast.status_code, strong.status_code) == (200, 200), fast.text + strong.text
            assert (fast.headers["x-specway-model"], strong.headers["x-specway-model"]) == ("fast", "strong")
            listed = [m["id"] for m in httpx.get(f"{term.url}/v1/models", headers=headers).json()["data"]]
            assert "specway/echo" not in listed and {"fast", "strong"} <= set(listed)  # as the README says
            # Clients: the SDK program, on those models
            printed_lines = term.python(found["sdk"].text).splitlines()
            assert len(printed_lines) == 2 and all(printed_lines)
            assert [r.path for r in fake.requests[-2:]] == ["/v1/chat/completions", "/v1/messages"]
            used = httpx.get(f"{term.url}/v1/usage", headers=headers).json()
            assert used["totals"]["requests"] >= 4 and float(used["totals"]["cost"]) > 0

        # Serving a team: every interface, then a workspace and a key of its own
        with term.serving(found["serve-team"].text.strip()):
            assert httpx.get(f"{term.url}/readyz").status_code == 200
            out = term.sh(found["team-keys"].text)
            assert "alice" in out and term.ids["ws_..."] in out
            team = json.loads(out[out.index("{"):out.index("}\n") + 1])
            assert (team["name"], team["credit"]) == ("team-a", "25.00")
