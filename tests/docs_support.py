"""Running the README's and docs/' blocks as written (tests/test_readme.py, tests/test_docs.py, and the tests that
run a block with a setup of their own).

Every fenced block of README.md and docs/*.md is marked `<!-- test: NAME -->` on the line before it. What a test
changes in a block, and only that:

- the port: 8080 (and 8081) becomes a free port, and 127.0.0.1 stays the host;
- the placeholder key `sk-sw-...` becomes the key the gateway printed;
- the placeholder ids `ws_...` and `key_...` become the last such id a command of the block printed before (or that
  the test made), as a reader copies the id just shown;
- the addresses of real services (providers, PostgreSQL, a trace collector) become local servers of the same kind.

A shell block runs in a folder of its own with bash (`-euo pipefail`), one command at a time, in one environment
that its assignments and `export`s change (bash -a), as in the terminal the README is followed in; `.venv/bin` is the project's venv, and
`specway` is on PATH (docs/ write the installed command's name).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_MARKED = re.compile(r"<!-- test: ([\w-]+) -->\n```(\w*)\n(.*?)^```", re.DOTALL | re.MULTILINE)
_FENCE = re.compile(r"^```(\w*)$", re.MULTILINE)
_IDS = {"ws_...": re.compile(r"\bws_[0-9a-f]{16}\b"), "key_...": re.compile(r"\bkey_[0-9a-f]{16}\b")}
VENV_BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Block:
    name: str
    file: Path
    lang: str
    text: str


def blocks() -> dict[str, Block]:
    """Every marked block of the README and docs/, by name (a name used twice fails here)."""
    found: dict[str, Block] = {}
    for path in DOCS:
        for name, lang, text in _MARKED.findall(path.read_text(encoding="utf-8")):
            assert name not in found, f"{path.name}: the block name {name!r} is taken by {found[name].file.name}"
            found[name] = Block(name, path, lang, text)
    return found


def block(name: str) -> str:
    return blocks()[name].text


def unmarked() -> list[str]:
    """`file:line` of every fenced block that no `<!-- test: NAME -->` line announces."""
    missing = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        opening = True
        for match in _FENCE.finditer(text):
            if opening:
                before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
                if not before.startswith("<!-- test: "):
                    missing.append(f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, match.start()) + 1}")
            opening = not opening
    return missing


def commands(text: str) -> list[str]:
    """A shell block's commands: lines joined where they end in a backslash; comments and blank lines dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line + "\n"
        if not line.endswith("\\"):
            out.append(current)
            current = ""
    assert not current, f"a command continues past the end of the block: {current!r}"
    return out


@dataclass
class Terminal:
    """A folder and a shell environment that a reader's terminal would have: the project venv in `.venv`."""

    folder: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    key: str = ""
    ids: dict[str, str] = field(default_factory=dict)
    replace: dict[str, str] = field(default_factory=dict)  # the real services' addresses -> local ones

    def __post_init__(self) -> None:
        venv = self.folder / ".venv"
        if not venv.exists():
            venv.symlink_to(VENV_BIN.parent)
        if not self.env:  # a reader's terminal: none of the test run's own settings, nor a make above it
            self.env = {k: v for k, v in os.environ.items()
                        if not k.startswith("SPECWAY_") and k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEFILES")}
        self.env["PATH"] = f"{VENV_BIN}{os.pathsep}{self.env.get('PATH', '')}"
        self.env["SPECWAY_SERVER__PORT"] = str(self.port)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def written(self, text: str) -> str:
        """The text as the test runs it (the module docstring says what changes)."""
        text = re.sub(r"\b8080\b", str(self.port), text).replace("sk-sw-...", self.key or "sk-sw-...")
        for placeholder, value in {**self.ids, **self.replace}.items():
            text = text.replace(placeholder, value)
        return text

    def sh(self, text: str, timeout: float = 120) -> str:
        """Run a shell block command by command; returns everything the block printed on stdout."""
        printed = []
        for command in commands(text):
            printed.append(self._one(self.written(command), timeout))
            for placeholder, pattern in _IDS.items():
                if seen := pattern.findall(printed[-1]):
                    self.ids[placeholder] = seen[-1]
        return "".join(printed)

    def _one(self, command: str, timeout: float) -> str:
        exported = self.folder / ".exported.env"
        script = f'{command}\nenv -0 > "{exported}"'
        done = subprocess.run(["bash", "-aeuo", "pipefail", "-c", script], cwd=self.folder,
                              env={**self.env, "RELAY_KEY": self.key}, capture_output=True, text=True,
                              timeout=timeout, check=False)
        assert done.returncode == 0, f"{command}\n{done.stdout}{done.stderr}"
        pairs = (item.partition("=") for item in exported.read_text().split("\0") if "=" in item)
        self.env.update({n: v for n, _, v in pairs if n not in ("RELAY_KEY", "PWD", "OLDPWD", "SHLVL", "_")})
        return done.stdout

    def python(self, text: str) -> str:
        done = subprocess.run([sys.executable, "-c", self.written(text)], cwd=self.folder,
                              env={**self.env, "RELAY_KEY": self.key}, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    @contextmanager
    def serving(self, command: str = ".venv/bin/specway serve", port: int | None = None) -> Iterator[str]:
        """A long-running command (a server) started in the background; yields what it printed on stdout first
        (the first key on a fresh store, else ""), once /healthz answers; stopped with SIGTERM at the end."""
        port = port or self.port
        log = self.folder / f".serve-{port}.log"
        proc = subprocess.Popen(["bash", "-c", self.written(command)], cwd=self.folder,
                                env={**self.env, "RELAY_KEY": self.key}, stdout=subprocess.PIPE,
                                stderr=log.open("w"), text=True, start_new_session=True)
        try:
            wait_healthy(f"http://127.0.0.1:{port}", proc, log)
            first = ""
            if proc.stdout is not None and _ready(proc.stdout):
                first = proc.stdout.readline().strip()
            yield first
        finally:  # the whole process group: `make run` is make and the gateway it started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
            _gone(proc.pid)
        assert "Traceback" not in log.read_text(), log.read_text()

    def log(self, port: int | None = None) -> str:
        return (self.folder / f".serve-{port or self.port}.log").read_text()


def _gone(group: int) -> None:
    """Wait until no live process of the group is left (the gateway drains after make has gone)."""
    deadline = time.monotonic() + 30
    while _alive_in(group):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
            return
        time.sleep(0.05)


def _alive_in(group: int) -> bool:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":  # state, ppid, pgrp
            return True
    return False


def _ready(stream: object) -> bool:
    import select

    readable, _, _ = select.select([stream], [], [], 0.5)
    return bool(readable)


def wait_healthy(url: str, proc: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(f"{url}/healthz", timeout=1).raise_for_status()
            return
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"the server did not start:\n{log.read_text()}") from None
            time.sleep(0.1)
