"""The model catalog: public ids, aliases, the upstream each lives on, prices per million tokens."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from generated.config import Config

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

    def cost(self, input_tokens: int, output_tokens: int) -> Decimal:
        return (self.price_in * input_tokens + self.price_out * output_tokens) / _MILLION


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
