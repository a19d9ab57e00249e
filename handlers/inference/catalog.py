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
        for m in config.models or []:
            price_in = price_out = "0"
            if m.price is not None:
                price_in, price_out = str(m.price.input), str(m.price.output)
            models.append(
                Model(
                    id=m.id,
                    upstream=m.upstream,
                    name=m.name,
                    aliases=tuple(m.aliases or ()),
                    price_in=Decimal(price_in),
                    price_out=Decimal(price_out),
                    context_window=m.context_window,
                    owned_by=m.owned_by or m.upstream,
                    display_name=m.display_name or m.id,
                )
            )
        return cls(models)

    def resolve(self, name: str) -> Model | None:
        """A model by its id or one of its aliases."""
        return self._by_name.get(name)

    @staticmethod
    def allowed(model: Model, allowlist: tuple[str, ...] | None, asked_as: str | None = None) -> bool:
        """A key's allowlist names ids or aliases; naming either admits the model under both."""
        if allowlist is None:
            return True
        return model.id in allowlist or any(a in allowlist for a in model.aliases) or asked_as in allowlist
