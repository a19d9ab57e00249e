"""Schemathesis' positive_data_acceptance, less the refusals Specway makes by design, each named and verified.

positive_data_acceptance fails a run when a schema-valid request is refused. Specway refuses three kinds of
schema-valid request on purpose, each with its own error code, because what decides them is not the request's shape:

- `unsupported_parameter`: a field the model's upstream kind cannot carry (`store` for a model behind an anthropic or
  echo upstream). Which upstream serves a request is configuration (the catalog and the key's routing).
- `unsupported_model` on `POST /v1/embeddings`: the named model exists but cannot embed (not an openai upstream, or not
  marked `embeddings: true` in the catalog); configuration too.
- `number_out_of_range`: a JSON number no encoder can write back as sent (an integer outside -2^63 .. 2^64-1), which
  RFC 8259 section 6 lets a server refuse, anywhere in the body (including fields no schema names).

Such a refusal is excused only when its code is one of these and its reason holds for the request that was sent: the
refused parameter is in the body, the refused model is the one the body names, the out-of-range number is where the
error says. Any other refusal of valid data fails as positive_data_acceptance would fail it.

The pytest suite imports this module; for the CLI, load it as a hooks file and run it in place of the built-in check:

    SCHEMATHESIS_HOOKS=tests/fuzz_support.py schemathesis run URL/openapi.json \
        --checks all,positive_data_acceptance_unless_by_design --exclude-checks positive_data_acceptance,use_after_free
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import schemathesis
from schemathesis.specs.openapi.checks import positive_data_acceptance

INT_MIN, INT_MAX = -(2**63), 2**64 - 1  # what handlers/edge/glue.py relays


@schemathesis.check
def positive_data_acceptance_unless_by_design(ctx: Any, response: Any, case: schemathesis.Case) -> bool | None:
    """positive_data_acceptance, except for a refusal by design whose reason holds (see the module's docstring)."""
    if refused_by_design(case, response):
        return None
    return positive_data_acceptance(ctx, response, case)


def refused_by_design(case: schemathesis.Case, response: Any) -> bool:
    if response.status_code != 400:
        return False
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, TypeError, KeyError):
        return False
    if not isinstance(error, dict):
        return False
    body = case.body if isinstance(case.body, dict) else {}
    code, param, message = error.get("code"), error.get("param"), str(error.get("message", ""))
    if isinstance(code, int):  # Google's shape (the Gemini paths): the gateway's code and param are in the details
        code, param = _google_details(error)
    if code == "unsupported_parameter":
        # The message of handlers/errors.py unsupported(): the upstream kind, not the request, is the reason.
        sent = isinstance(param, str) and body.get(param.split(".")[0]) is not None
        return sent and "cannot reach this model: its " in message
    if code == "unsupported_model":
        model = body.get("model")
        return (case.operation.label == "POST /v1/embeddings" and param == "model" and isinstance(model, str)
                and f"The model {model!r} cannot make embeddings" in message)
    if code == "number_out_of_range":
        return param in {".".join(map(str, path)) for path in _unsendable_numbers(case.body, ())}
    return False


def _google_details(error: dict[str, Any]) -> tuple[Any, Any]:
    """(code, param) of an error in Google's shape: an ErrorInfo's reason, a BadRequest's field violation."""
    details = [d for d in error.get("details") or () if isinstance(d, dict)]
    reasons = [d.get("reason") for d in details if str(d.get("@type", "")).endswith("google.rpc.ErrorInfo")]
    fields = [v.get("field") for d in details if str(d.get("@type", "")).endswith("google.rpc.BadRequest")
              for v in d.get("fieldViolations") or () if isinstance(v, dict)]
    return (reasons[0] if reasons else None), (fields[0] if fields else None)


def _unsendable_numbers(value: Any, path: tuple[str | int, ...]) -> Iterator[tuple[str | int, ...]]:
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not INT_MIN <= value <= INT_MAX:
        yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _unsendable_numbers(item, (*path, key))
