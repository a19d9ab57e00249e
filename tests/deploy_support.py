"""What the deployment files say, read the way their tools read them: the Dockerfile's instructions, compose.yaml's
services with their `${VAR:-default}`s filled in, the systemd unit's sections (tests/test_deploy.py,
tests/test_container.py)."""

from __future__ import annotations

import configparser
import json
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
_DEFAULTED = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")


@dataclass
class Dockerfile:
    """The instructions of each stage, in order: (INSTRUCTION, arguments as written)."""

    stages: list[list[tuple[str, str]]] = field(default_factory=list)
    args: dict[str, str] = field(default_factory=dict)  # ARGs before the first FROM, with their defaults

    @classmethod
    def read(cls, path: Path = ROOT / "Dockerfile") -> Dockerfile:
        found = cls()
        logical = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
        for line in logical.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            word, _, rest = line.strip().partition(" ")
            word = word.upper()
            if word == "FROM":
                found.stages.append([])
            if not found.stages:
                if word == "ARG":
                    name, _, default = rest.partition("=")
                    found.args[name] = default
                continue
            found.stages[-1].append((word, rest.strip()))
        return found

    @property
    def final(self) -> list[tuple[str, str]]:
        return self.stages[-1]

    def base(self) -> str:
        """The image the final stage starts from, ARGs filled in (what the test tags its stand-in as)."""
        image = self.final[0][1].split()[0]
        return re.sub(r"\$\{(\w+)\}", lambda m: self.args[m[1]], image)

    def one(self, word: str) -> str:
        found = [rest for w, rest in self.final if w == word]
        assert len(found) == 1, f"the image's stage has {len(found)} {word} instructions"
        return found[0]

    def env(self) -> dict[str, str]:
        pairs: dict[str, str] = {}
        for word, rest in self.final:
            if word == "ENV":
                pairs.update(dict(item.split("=", 1) for item in shlex.split(rest)))
        return pairs

    def exec_form(self, word: str) -> list[str]:
        value = self.one(word)
        return list(json.loads(value[value.index("["):]))


def project_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"])


def compose(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """compose.yaml with `${VAR}` and `${VAR:-default}` replaced as `docker compose` does (from `environ`)."""
    environ = environ or {}
    text = _DEFAULTED.sub(lambda m: environ.get(m[1]) or (m[2] or ""), (ROOT / "compose.yaml").read_text())
    return dict(yaml.safe_load(text))


def systemd_unit(path: Path = ROOT / "deploy" / "systemd" / "specway.service") -> configparser.ConfigParser:
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    unit.read_string(path.read_text(encoding="utf-8"))
    return unit
