"""The model catalog: public ids, aliases, the upstream each lives on, prices per million tokens."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from generated.config import Config
from handlers.inference.canonical import Usage

_MILLION = Decimal(1_000_000)


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

    @property
    def cached_input_price(self) -> Decimal:
        return self.price_in if self.price_cached_in is None else self.price_cached_in

    @property
    def cache_write_price(self) -> Decimal:
        return self.price_in if self.price_cache_write is None else self.price_cache_write

    def cost(self, usage: Usage) -> Decimal:
        """What `usage` costs, each part at its own price. Input counts every prompt token (cache reads and writes
        included, as canonical Usage does); a count not reported is 0."""
        inp, out = usage.input_tokens or 0, usage.output_tokens or 0
        cached, written = usage.cached_input_tokens or 0, usage.cache_write_tokens or 0
        plain = max(0, inp - cached - written)
        return (self.price_in * plain + self.cached_input_price * cached + self.cache_write_price * written
                + self.price_out * out) / _MILLION

    def worst_case(self, input_tokens: int, output_tokens: int) -> Decimal:
        """The most `input_tokens` and `output_tokens` can cost, before anyone knows which input is cached: every
        input token at the highest input-side price."""
        highest = max(self.price_in, self.cached_input_price, self.cache_write_price)
        return (highest * input_tokens + self.price_out * output_tokens) / _MILLION


def _price(value: str | float | None) -> Decimal | None:
    return None if value is None else Decimal(str(value))


class Catalog:
    def __init__(self, models: list[Model]) -> None:
        self.models = models
        self._by_name: dict[str, Model] = {}
        for m in models:
            for name in (m.id, *m.aliases):
                self._by_name[name] = m

    @classmethod
    def from_config(cls, config: Config) -> Catalog:
        models = []
        for m in config.models:
            models.append(
                Model(
                    id=m.id,
                    upstream=m.upstream,
                    name=m.name,
                    aliases=tuple(m.aliases),
                    price_in=Decimal(str(m.price.input)),
                    price_out=Decimal(str(m.price.output)),
                    context_window=m.context_window,
                    owned_by=m.owned_by or m.upstream,
                    display_name=m.display_name or m.id,
                    reasoning=m.reasoning,
                    price_cached_in=_price(m.price.cached_input),
                    price_cache_write=_price(m.price.cache_write),
                    embeddings=m.embeddings,
                    refuse_hosted=m.hosted_tools == "refuse",
                )
            )
        return cls(models)

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
