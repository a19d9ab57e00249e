"""specway models lookup NAME: what the known-model data says of a model, as the catalog would fill it in."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when the command runs: the data packages take a while to load
    from handlers.inference import known


def _providers(kind: str | None) -> dict[known.DataProvider, list[str]]:
    """Each provider the data is looked up among, with the upstream kinds that serve its models."""
    from handlers.inference.upstreams.registry import KINDS

    found: dict[known.DataProvider, list[str]] = {}
    for name, cls in KINDS.items():
        for provider in cls.data_providers() if kind in (None, name) else ():
            found.setdefault(provider, []).append(name)
    return found


def _shown(data: known.Known, kinds: list[str]) -> dict[str, Any]:
    """The data's values as JSON: prices per million tokens as exact decimal strings, None where it says nothing."""
    shown = dataclasses.asdict(data)
    return {"kinds": kinds, **json.loads(json.dumps(shown, default=str))}


def cmd_lookup(args: argparse.Namespace) -> int:
    from handlers.inference import known

    providers = _providers(args.provider)
    if not providers:
        every = sorted(kind for kinds in _providers(None).values() for kind in kinds)
        print(f"specway: --provider {args.provider!r} is not an upstream kind the data covers: {', '.join(every)}",
              file=sys.stderr)
        return 2
    matches = []
    for provider, kinds in providers.items():
        data = known.lookup(provider, args.name)
        if data is not None:
            matches.append(_shown(data, kinds))
    print(json.dumps({"name": args.name, "data": known.versions(), "prices": "per million tokens",
                      "matches": matches}, indent=2))
    if not matches:
        print(f"specway: the known-model data does not know {args.name!r}: a catalog entry for it is free unless "
              "it sets a price, and not reasoning unless it sets `reasoning: true`", file=sys.stderr)
        return 1
    return 0


def add_parser(sub: Any) -> None:
    m = sub.add_parser("models", help="what the known-model data says of a model")
    msub = m.add_subparsers(dest="action", required=True)
    lk = msub.add_parser("lookup", help="prices per million tokens, window, most output and abilities, as JSON")
    lk.add_argument("name", help="the model's name at its upstream, e.g. gpt-4o-mini or claude-sonnet-4-5-20250929")
    lk.add_argument("--provider", metavar="KIND",
                    help="look among this upstream kind's models only, e.g. anthropic (default: every kind the data "
                    "covers)")
    lk.set_defaults(fn=cmd_lookup)
