"""The registries are complete: every wire format in FORMATS satisfies the Protocols of formats/base.py (and every
format only upstreams speak, in UPSTREAM_FORMATS, the upstream half), every upstream kind the configuration admits
has its class, and no module outside formats/ names a format's field."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any, get_args

import pytest

from generated.config import UpstreamSettings
from handlers.inference import formats  # noqa: F401  (fills FORMATS)
from handlers.inference.canonical import Dialect, Format
from handlers.inference.formats import base
from handlers.inference.formats.base import FORMATS, UPSTREAM_FORMATS, UpstreamFormat, WireFormat
from handlers.inference.upstreams.base import Upstream
from handlers.inference.upstreams.http import HttpUpstream
from handlers.inference.upstreams.registry import KINDS

ROOT = Path(__file__).resolve().parent.parent
HANDLERS = ROOT / "handlers"


def _protocol_members(protocol: type) -> set[str]:
    names: set[str] = set()
    for cls in protocol.__mro__:
        if cls is object or cls.__name__ == "Protocol" or cls.__name__ == "Generic":
            continue
        names |= set(getattr(cls, "__annotations__", {})) | {n for n in vars(cls) if not n.startswith("_")}
    return names


def test_every_format_name_is_registered() -> None:
    assert sorted(FORMATS) == sorted(get_args(Format))


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_format_satisfies_the_protocols(name: str) -> None:
    fmt: Any = FORMATS[name]
    missing = sorted(m for m in _protocol_members(WireFormat) if not hasattr(fmt, m))
    assert missing == []
    assert fmt.VOCABULARY.name == name
    for fn, protocol in (("parse", base.CallerFormat), ("render", base.CallerFormat),
                         ("upstream_body", base.UpstreamFormat), ("upstream_result", base.UpstreamFormat)):
        want = list(inspect.signature(getattr(protocol, fn)).parameters)[1:]  # without self
        assert list(inspect.signature(getattr(fmt, fn)).parameters) == want, f"{name}.{fn}"


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_each_format_package_has_the_same_modules(name: str) -> None:
    package = HANDLERS / "inference" / "formats" / name
    assert sorted(p.stem for p in package.glob("*.py")) == sorted(
        ["__init__", "request", "answer", "stream", "upstream", "reader", "vocabulary"])


UPSTREAM_ONLY = sorted(set(UPSTREAM_FORMATS) - set(FORMATS))


def test_every_upstream_format_is_registered() -> None:
    assert sorted(UPSTREAM_FORMATS) == sorted(get_args(Dialect))
    assert all(UPSTREAM_FORMATS[name] is fmt for name, fmt in FORMATS.items())
    assert UPSTREAM_ONLY == ["converse"]


@pytest.mark.parametrize("name", UPSTREAM_ONLY)
def test_each_upstream_only_format_is_the_upstream_half(name: str) -> None:
    """A format no caller speaks has the modules (and Protocol members) of an upstream's side, and no others."""
    fmt: Any = UPSTREAM_FORMATS[name]
    assert sorted(m for m in _protocol_members(UpstreamFormat) if not hasattr(fmt, m)) == []
    for fn in ("upstream_body", "upstream_result"):
        want = list(inspect.signature(getattr(UpstreamFormat, fn)).parameters)[1:]
        assert list(inspect.signature(getattr(fmt, fn)).parameters) == want, f"{name}.{fn}"
    package = HANDLERS / "inference" / "formats" / name
    assert sorted(p.stem for p in package.glob("*.py")) == sorted(["__init__", "upstream", "reader", "vocabulary"])


def test_field_rules_cover_every_declared_field() -> None:
    """What a format models, leaves out or refuses is decided for every field its spec declares."""
    for fmt in FORMATS.values():
        rules = fmt.VOCABULARY.fields
        assert rules.modelled and rules.extra and not rules.modelled & rules.extra
        assert rules.advisory <= rules.extra and set(rules.inert) <= rules.extra


def test_every_configured_kind_has_its_class() -> None:
    assert sorted(KINDS) == sorted(get_args(UpstreamSettings.model_fields["kind"].annotation))
    for kind, cls in KINDS.items():
        assert cls.kind == kind and issubclass(cls, Upstream) and not inspect.isabstract(cls)
        assert isinstance(cls.system, str) and cls.system
        if issubclass(cls, HttpUpstream):
            assert cls.speaks in UPSTREAM_FORMATS, f"{kind} speaks no registered format"


def _field_names() -> set[str]:
    """The fields only a wire format defines: declared by a format's request and modelled by none of the others'
    words the gateway owns (model, stream, messages ...)."""
    owned = {"model", "messages", "stream", "input", "tools", "metadata", "user", "store", "system", "text",
             "format", "effort", "stop", "conversation"}  # conversation: also affinity's own word for a session
    return {f.split(".")[-1] for fmt in FORMATS.values() for f in fmt.VOCABULARY.fields.modelled
            | fmt.VOCABULARY.fields.extra} - owned


def test_no_module_outside_formats_names_a_formats_field() -> None:
    """A format's contract lives in its package: a field name as a string anywhere else in the runtime is a
    format's knowledge leaking out."""
    names = _field_names()
    found = []
    for path in sorted(HANDLERS.rglob("*.py")):
        if "formats" in path.relative_to(HANDLERS).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert found == []
