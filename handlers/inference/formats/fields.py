"""A format's request fields as the spec marks them (`x-translate`, linted by the generator): read from the generated
request models, so that no list of fields is kept by hand."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from handlers.inference.formats.base import FieldRules


def rules(model: type[BaseModel], nested: Mapping[str, type[BaseModel]] | None = None) -> FieldRules:
    """The rules of `model`'s fields, and of the fields of `nested` objects under their dotted names
    ("reasoning.summary"): which the canonical Request models, which are advisory, which values are inert."""
    every: set[str] = set()
    modelled: set[str] = set()
    advisory: set[str] = set()
    inert: dict[str, Any] = {}
    groups = [("", model), *((f"{name}.", sub) for name, sub in (nested or {}).items())]
    for prefix, cls in groups:
        for name, field in cls.model_fields.items():
            name = field.alias or name
            every.add(prefix + name)
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            mark = extra.get("x-translate")
            if mark == "canonical":
                modelled.add(prefix + name)
            elif mark == "advisory":
                advisory.add(prefix + name)
            elif isinstance(mark, dict):
                inert[prefix + name] = mark["inert"]
    return FieldRules(frozenset(modelled), frozenset(advisory), inert, frozenset(every - modelled))
