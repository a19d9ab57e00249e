"""Values both SQL backends share: ids, UTC times, money, budget periods, validation and row -> dataclass.

Rows come back as Decimal/datetime (asyncpg) or as text (SQLite); the readers here take either.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, get_args

import orjson

from .base import SCOPES, BudgetPeriod, Key, Limits, Workspace

PERIODS: tuple[str, ...] = get_args(BudgetPeriod)
_CENT = Decimal("0.01")


def new_id(prefix: str, nbytes: int = 8) -> str:
    return prefix + secrets.token_hex(nbytes)


def utcnow() -> datetime:
    return datetime.now(UTC)


def utc(value: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken to be UTC already."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def iso(value: datetime) -> str:
    """The one text form of a time (fixed width, so text order is time order)."""
    return utc(value).isoformat(timespec="microseconds")


def as_money(value: Decimal | int) -> Decimal:
    """A finite Decimal; floats are refused because they are not exact."""
    if isinstance(value, bool) or not isinstance(value, (Decimal, int)):
        raise TypeError(f"money must be a Decimal or an int, not {type(value).__name__}")
    amount = Decimal(value)
    if not amount.is_finite():
        raise ValueError(f"money must be finite, not {amount}")
    return amount


def money_text(amount: Decimal) -> str:
    """An amount as people write it: never an exponent (Decimal's str gives "0E-8" for a zero of eight places)."""
    return "0" if amount == 0 else f"{amount:f}"


def fmt_money(amount: Decimal) -> str:
    """At least two decimals, more when the amount has them: 1.20, 0.30, 0.000125."""
    cents = amount.quantize(_CENT)
    return f"{cents:f}" if cents == amount else f"{amount.normalize():f}"


def period_floor(period: str, now: datetime) -> datetime | None:
    """Start of the budget period containing `now` (UTC day or calendar month); None for 'total'."""
    now = utc(now)
    if period == "daily":
        return now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "monthly":
        return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return None


def validate_scopes(scopes: Any) -> tuple[str, ...]:
    if isinstance(scopes, str):
        raise TypeError("scopes must be a sequence of scope names, not a string")
    if unknown := [s for s in scopes if s not in SCOPES]:
        raise ValueError(f"unknown scopes {unknown}; known: {', '.join(SCOPES)}")
    return tuple(scopes)


def validate_models(models: Any) -> tuple[str, ...] | None:
    if isinstance(models, str):
        raise TypeError("models must be a sequence of model ids or None, not a string")
    return None if models is None else tuple(models)


def validate_limits(limits: Limits) -> Limits:
    if not isinstance(limits, Limits):
        raise TypeError(f"limits must be a Limits, not {type(limits).__name__}")
    if limits.budget_period not in PERIODS:
        raise ValueError(f"budget_period must be one of {', '.join(PERIODS)}, not {limits.budget_period!r}")
    budget = None if limits.budget is None else as_money(limits.budget)
    if budget is not None and budget < 0:
        raise ValueError(f"a budget cannot be negative ({budget})")
    for name in ("rpm", "tpm"):
        value = getattr(limits, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be a non-negative int or None, not {value!r}")
    return replace(limits, budget=budget)


def apply_key_changes(key: Key, changes: dict[str, Any], now: datetime) -> Key:
    """A copy of `key` with validated changes (names already checked by the caller)."""
    checks = {
        "name": str,
        "scopes": validate_scopes,
        "models": validate_models,
        "policy": lambda p: p,
        "expires_at": lambda at: None if at is None else utc(at),
        "limits": validate_limits,
    }
    return replace(key, **{field: checks[field](value) for field, value in changes.items()})


def _dec(value: Any) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(value)


def as_time(value: Any) -> datetime | None:
    if value is None:
        return None
    return utc(value if isinstance(value, datetime) else datetime.fromisoformat(value))


def _strings(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(json.loads(value) if isinstance(value, str) else value)


def to_workspace(row: Any) -> Workspace:
    return Workspace(
        id=row["id"],
        name=row["name"],
        credit=_dec(row["credit"]),
        reserved=_dec(row["reserved"]),
        spend_total=_dec(row["spend_total"]),
        created_at=as_time(row["created_at"]),  # type: ignore[arg-type]  # NOT NULL
        revoked_at=as_time(row["revoked_at"]),
    )


def to_key(row: Any) -> Key:
    budget = row["budget"]
    return Key(
        id=row["id"], workspace_id=row["workspace_id"], name=row["name"], hint=row["hint"],
        scopes=_strings(row["scopes"]) or (), models=_strings(row["models"]), policy=row["policy"],
        expires_at=as_time(row["expires_at"]), created_at=as_time(row["created_at"]),  # type: ignore[arg-type]
        last_used_at=as_time(row["last_used_at"]), revoked_at=as_time(row["revoked_at"]),
        limits=Limits(None if budget is None else _dec(budget), row["budget_period"], row["rpm"], row["tpm"]),
        spend_total=_dec(row["spend_total"]), spend_period=_dec(row["spend_period"]),
        period_start=as_time(row["period_start"]), reserved=_dec(row["reserved"]),
        workspace_revoked_at=as_time(row["workspace_revoked_at"]), rotated_at=as_time(row["rotated_at"]),
        previous_expires_at=as_time(row["previous_expires_at"]),
    )  # fmt: skip


def key_row(key: Key) -> dict[str, Any]:
    """The columns of `keys` (but the secret's hash) for a Key."""
    lim = key.limits
    return {
        "id": key.id, "workspace_id": key.workspace_id, "name": key.name, "hint": key.hint,
        "scopes": json.dumps(list(key.scopes)),
        "models": None if key.models is None else json.dumps(list(key.models)),
        "policy": key.policy, "expires_at": key.expires_at, "created_at": key.created_at,
        "last_used_at": key.last_used_at, "revoked_at": key.revoked_at,
        "budget": lim.budget, "budget_period": lim.budget_period, "rpm": lim.rpm, "tpm": lim.tpm,
        "spend_total": key.spend_total, "spend_period": key.spend_period, "period_start": key.period_start,
        "reserved": key.reserved, "rotated_at": key.rotated_at, "previous_expires_at": key.previous_expires_at,
    }  # fmt: skip


def listed_model(record: dict[str, Any]) -> str:
    """The model a decision record is counted and listed under: the one that answered; for one refused before any
    answer (402, 429, every upstream away), the model it was routed to, else the one it named; "" when it reached no
    model at all."""
    candidates = record.get("candidates") or []
    return record.get("model") or (candidates[0].get("model") if candidates else None) or \
        record.get("requested_model") or ""


def to_decision(record: dict[str, Any]) -> tuple[Any, ...]:
    """(id, created_at, workspace_id, key_id, model, outcome, JSON) for the decisions table."""
    for required in ("id", "created_at"):
        if required not in record:
            raise ValueError(f"a decision record needs {required!r}")
    created_at = as_time(record["created_at"])
    text = _json(record)
    if "\\u0000" in text:  # a NUL from the caller (a model name, say): PostgreSQL's jsonb refuses it
        record = _without_nul(record)
        text = _json(record)
    return (record["id"], created_at, record.get("workspace_id"), record.get("key_id"), listed_model(record),
            record.get("outcome"), text)


def _json(record: dict[str, Any]) -> str:
    """The record as compact JSON text: orjson's, or the standard library's for what orjson refuses (an integer past
    64 bits; keys that are not strings are written as strings by both)."""
    try:
        return orjson.dumps(record, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nul(v) for v in value]
    return value
