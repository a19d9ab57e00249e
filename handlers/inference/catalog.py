"""The model catalog: public ids, aliases, the upstream each lives on, prices per million tokens, and what is known of
each model: from the configuration, else from the known-model data (known.py), value by value."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from generated.config import Config, DeploymentSettings, ModelSettings
from generated.models import ModelSources
from handlers.inference import known
from handlers.inference.canonical import Usage
from handlers.inference.known import Known, Tier

_MILLION = Decimal(1_000_000)
log = logging.getLogger("specway")

Source = Literal["config", "catalog", "default"]  # set by the configuration; by the known-model data; by neither
# The values whose source the catalog keeps, by the names GET /v1/models shows them under (the spec's ModelSources).
SOURCED_FIELDS = tuple(ModelSources.model_fields)
(_INPUT, _OUTPUT, _CACHED, _WRITTEN, _WINDOW, _MOST_OUTPUT, _REASONING, _VISION, _TOOLS,
 _STRUCTURED) = SOURCED_FIELDS


@dataclass(frozen=True, slots=True)
class Model:
    id: str
    upstream: str
    name: str  # the upstream's own name; never shown to callers
    aliases: tuple[str, ...]
    price_in: Decimal  # per million input tokens
    price_out: Decimal  # per million output tokens
    context_window: int | None
    owned_by: str
    display_name: str
    reasoning: bool = False  # takes an effort in its upstream's words (see ModelSettings.reasoning)
    price_cached_in: Decimal | None = None  # per million input tokens read from a prompt cache; None: price_in
    price_cache_write: Decimal | None = None  # per million input tokens written to a prompt cache; None: price_in
    embeddings: bool = False  # answers POST /v1/embeddings (see ModelSettings.embeddings)
    refuse_hosted: bool = False  # a hosted tool its upstream has no equivalent of is a 400 (ModelSettings.hosted_tools)
    tiers: tuple[Tier, ...] = ()  # long-context prices, ascending (the data's; a price the config sets has none)
    max_output_tokens: int | None = None
    vision: bool | None = None  # None: nobody says
    tool_calling: bool | None = None
    structured_output: bool | None = None
    sources: tuple[tuple[str, Source], ...] = ()  # where each of SOURCED_FIELDS came from; unnamed: default
    known_as: str | None = None  # the data's id for the model (an operator's fact: never shown to callers)
    weight: float = 1.0  # this deployment's share under `balance: weighted` (DeploymentSettings.weight)
    rpm: int | None = None  # the provider's quotas for this deployment, which the gateway keeps under
    tpm: int | None = None

    @property
    def deployment(self) -> str:
        """The deployment this entry is: its model name on its upstream. Health, cooldowns and quotas are kept per
        deployment, so one failing model never takes down its neighbours on the same upstream."""
        return f"{self.upstream}/{self.name}"

    @property
    def cached_input_price(self) -> Decimal:
        return self.price_in if self.price_cached_in is None else self.price_cached_in

    @property
    def cache_write_price(self) -> Decimal:
        return self.price_in if self.price_cache_write is None else self.price_cache_write

    def source(self, field: str) -> Source:
        return self.sources_of((field,))[field]

    def sources_of(self, fields: Iterable[str]) -> dict[str, Source]:
        """Where each of `fields` came from, read in one pass (a decision record names four)."""
        named = dict(self.sources)
        return {f: named.get(f, "default") for f in fields}

    def prices_at(self, input_tokens: int) -> tuple[Decimal, Decimal, Decimal, Decimal]:
        """Input, output, cache read and cache write prices for a request of `input_tokens` prompt tokens: the tier
        it is above, if any (the whole request at that tier's prices), else the base prices."""
        p = (self.price_in, self.price_out, self.price_cached_in, self.price_cache_write)
        for tier in self.tiers:
            if input_tokens > tier.above:
                changed = (tier.input, tier.output, tier.cached_input, tier.cache_write)
                p = tuple(new if new is not None else old for new, old in zip(changed, p, strict=True))  # type: ignore[assignment]
        inp, out, cached, written = p
        assert inp is not None and out is not None
        return inp, out, inp if cached is None else cached, inp if written is None else written

    def cost(self, usage: Usage) -> Decimal:
        """What `usage` costs, each part at its own price. Input counts every prompt token (cache reads and writes
        included, as canonical Usage does); a count not reported is 0."""
        inp, out = usage.input_tokens or 0, usage.output_tokens or 0
        cached, written = usage.cached_input_tokens or 0, usage.cache_write_tokens or 0
        plain = max(0, inp - cached - written)
        p_in, p_out, p_cached, p_written = self.prices_at(inp)
        return (p_in * plain + p_cached * cached + p_written * written + p_out * out) / _MILLION

    def worst_case(self, input_tokens: int, output_tokens: int) -> Decimal:
        """The most `input_tokens` and `output_tokens` can cost, before anyone knows which input is cached: every
        input token at the highest input-side price."""
        p_in, p_out, p_cached, p_written = self.prices_at(input_tokens)
        return (max(p_in, p_cached, p_written) * input_tokens + p_out * output_tokens) / _MILLION


def _price(value: str | float | None) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _pick(sources: dict[str, Source], field: str, configured: Any, data: Any) -> Any:
    """The configured value, else the data's; its source noted under `field` (none noted: the default)."""
    if configured is not None:
        sources[field] = "config"
        return configured
    if data is not None:
        sources[field] = "catalog"
    return data


def _tiers(data: Known | None, configured: tuple[bool, ...]) -> tuple[Tier, ...]:
    """The data's tiers without the prices the configuration sets (a configured price holds at every length)."""
    if data is None:
        return ()
    kept = []
    for t in data.tiers:
        prices = [None if set_ else p for set_, p in zip(configured, (t.input, t.output, t.cached_input,
                                                                       t.cache_write), strict=True)]
        if any(p is not None for p in prices):
            kept.append(Tier(t.above, *prices))
    return tuple(kept)


def _model(m: ModelSettings, dep: DeploymentSettings, data: Known | None) -> Model:
    """One deployment of the catalog model `m`, its values from the deployment, else the model, else the data."""
    d = data or Known(data_id="", provider="")
    src: dict[str, Source] = {}
    price = dep.price
    # A configured input price is what the cache prices follow unless the config says them too: the data's cache
    # prices go with the data's input price (so `price: {input: 0, output: 0}` is free).
    own_input = price.input is not None
    cached = None if own_input else d.cached_input
    written = None if own_input else d.cache_write
    configured = (own_input, price.output is not None, own_input or price.cached_input is not None,
                  own_input or price.cache_write is not None)
    return Model(
        id=m.id, upstream=dep.upstream, name=dep.name, aliases=tuple(m.aliases),
        price_in=_pick(src, _INPUT, _price(price.input), d.input) or Decimal(0),
        price_out=_pick(src, _OUTPUT, _price(price.output), d.output) or Decimal(0),
        price_cached_in=_pick(src, _CACHED, _price(price.cached_input), cached),
        price_cache_write=_pick(src, _WRITTEN, _price(price.cache_write), written),
        tiers=_tiers(data, configured),
        context_window=_pick(src, _WINDOW, dep.context_window or m.context_window, d.context_window),
        max_output_tokens=_pick(src, _MOST_OUTPUT, m.max_output_tokens, d.max_output_tokens),
        reasoning=bool(_pick(src, _REASONING, m.reasoning, d.reasoning)),
        vision=_pick(src, _VISION, None, d.vision),
        tool_calling=_pick(src, _TOOLS, None, d.tool_calling),
        structured_output=_pick(src, _STRUCTURED, None, d.structured_output),
        owned_by=m.owned_by or dep.upstream, display_name=m.display_name or m.id,
        embeddings=m.embeddings, refuse_hosted=m.hosted_tools == "refuse",
        sources=tuple(src.items()), known_as=data.data_id if data is not None else None,
        weight=float(dep.weight), rpm=dep.rpm, tpm=dep.tpm,
    )


class Catalog:
    """The catalog's models, each as its first deployment (what GET /v1/models shows), and every deployment of each
    (Model is one deployment of a catalog id)."""

    def __init__(self, models: list[Model], deployments: dict[str, tuple[Model, ...]] | None = None) -> None:
        self.models = models
        self.unknown: tuple[str, ...] = ()  # ids of models the data does not know and the configuration leaves unpriced
        self._deployments = deployments or {}
        self._by_name: dict[str, Model] = {}
        for m in models:
            for name in (m.id, *m.aliases):
                self._by_name[name] = m

    @classmethod
    def from_config(cls, config: Config) -> Catalog:
        """The configured models, each value the configuration leaves unset filled from the known-model data."""
        from handlers.config import deployments
        from handlers.inference.upstreams.registry import KINDS  # the kinds know their providers

        models, every, unknown = [], {}, []
        for m in config.models:
            made = []
            for dep in deployments(m):
                upstream = config.upstreams.get(dep.upstream)
                provider = KINDS[upstream.kind].data_for(dep.name) if upstream is not None else None
                made.append(_model(m, dep, known.lookup(provider, dep.name) if provider is not None else None))
                if provider is not None and made[-1].source(_INPUT) == "default":
                    unknown.append(m.id)  # neither the data nor the configuration prices it: free, as it always was
            models.append(made[0])
            every[m.id] = tuple(made)
        catalog = cls(models, every)
        catalog.unknown = tuple(dict.fromkeys(unknown))
        return catalog

    def deployments(self, model: Model) -> tuple[Model, ...]:
        """Every deployment of `model`'s catalog id, in the configuration's order."""
        return self._deployments.get(model.id) or (model,)

    def all_deployments(self) -> list[Model]:
        """Every deployment of every model, in the catalog's order."""
        return [d for m in self.models for d in self.deployments(m)]

    def resolve(self, name: str) -> Model | None:
        """A model by its id or one of its aliases."""
        return self._by_name.get(name)

    @staticmethod
    def usable_names(model: Model, allowlist: tuple[str, ...] | None) -> tuple[str, ...]:
        """The names a key may use `model` under: the one allowlist rule, for routing and GET /v1/models alike.

        An allowlist admits models, named by id or by any alias; an admitted model is usable under its id and every
        alias (aliases are names for the same upstream model and price, so withholding one would protect nothing).
        None admits every model.
        """
        names = (model.id, *model.aliases)
        if allowlist is None or any(name in allowlist for name in names):
            return names
        return ()

    @staticmethod
    def allowed(model: Model, allowlist: tuple[str, ...] | None, asked_as: str | None = None) -> bool:
        """Whether a key may use `model` under the name `asked_as` (its id when None)."""
        return (asked_as or model.id) in Catalog.usable_names(model, allowlist)
