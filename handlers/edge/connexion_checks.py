"""Connexion's request checks as the app runs them: the parameters and the content type of each operation, with what
depends only on the operation made once, and the body left to the generated route (which parses it with pydantic).
Used by handlers/edge/connexion_adapter.py (the rest of Connexion's internals the app relies on is listed there).

Checked against Connexion 3.3.0 (read in .venv/lib/python3.11/site-packages/connexion). On an upgrade, re-read the
pieces below; each names what it relies on and why it exists:

- `BodyParsedByRoute` replaces the `"*/*json"` entry of `validators.VALIDATOR_MAP["body"]`.
  `RequestValidationOperation.__call__` (middleware/request_validation.py) builds it with keyword arguments and
  awaits `wrap_receive(receive, scope=scope)`; ours returns both untouched, so the body is parsed once, with
  pydantic, by the generated route instead of also by jsonschema.
- `Checking` replaces `RequestValidationMiddleware` (same checks, same order, same refusals): per request
  Connexion builds two URI parsers, a parameter validator and a `MediaTypeDict` of the consumed types, all fixed
  by the operation; `CheckedOperation` makes them once. A body that a validator other than `BodyParsedByRoute`
  would read goes through Connexion's own `__call__`. It relies on `RequestValidationOperation`'s
  `_operation`, `_validator_map`, `strict_validation`, `security_query_params`, `extract_content_type` and
  `validate_mime_type`, and on `RequestValidationAPI.validator_map`.
- `NamedParameters` subclasses `ParameterValidator` (validators/parameter.py): it relies on `parameters` (the
  operation's parameters by `in`), on `validate_parameter` being called through the instance (`validate_*_parameter`)
  and on its checks (`is_nullable`/`is_null`, then a `Draft4Validator` of the parameter's schema with
  `draft4_format_checker`), which it makes once per parameter instead of per value; `validate(scope)` reads the
  headers itself when only headers can be there (no query string; nothing required, in the path or a cookie).
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from connexion import utils
from connexion.datastructures import MediaTypeDict
from connexion.exceptions import BadRequestProblem
from connexion.middleware.request_validation import (
    RequestValidationAPI,
    RequestValidationMiddleware,
    RequestValidationOperation,
)
from connexion.operations import AbstractOperation
from connexion.utils import is_null, is_nullable
from connexion.validators import ParameterValidator
from connexion.validators.parameter import draft4_format_checker
from jsonschema import Draft4Validator, ValidationError


class CheckedOperation(RequestValidationOperation):
    """Connexion's checks of parameters and content type, with what depends only on the operation (its parameter
    validator and URI parser, the content types it consumes, whether a body validator runs) made once."""

    _MIME_TYPES_KEPT = 16  # content types remembered per operation (they come from clients)

    @functools.cached_property
    def _parameters(self) -> ParameterValidator:
        op = self._operation
        return self._validator_map["parameter"](op.parameters, uri_parser=op.uri_parser_class(
            op.parameters, op.body_definition()), strict_validation=self.strict_validation,
            security_query_params=self.security_query_params)

    @functools.cached_property
    def _consumes(self) -> MediaTypeDict:
        return MediaTypeDict([(c.lower(), None) for c in self._operation.consumes])

    @functools.cached_property
    def _body_left_alone(self) -> dict[str, bool]:
        return {}

    def validate_mime_type(self, mime_type: str) -> None:
        if self._operation.consumes and mime_type.lower() not in self._consumes:
            super().validate_mime_type(mime_type)  # raises Connexion's own refusal

    def _leaves_body(self, mime_type: str) -> bool:
        """Whether Connexion would leave this body alone: no schema, no validator, or the route's own parsing."""
        known = self._body_left_alone.get(mime_type)
        if known is None:
            try:
                validator = self._validator_map["body"][mime_type] if self._operation.body_schema(mime_type) else None
            except KeyError:
                validator = None
            known = validator is None or validator is BodyParsedByRoute
            if len(self._body_left_alone) < self._MIME_TYPES_KEPT:
                self._body_left_alone[mime_type] = known
        return known

    def extract_content_type(self, headers: list[tuple[bytes, bytes]]) -> tuple[str, str]:
        # connexion.utils.extract_content_type, which also takes dicts, builds a typing alias on every call
        content_type = next((v.decode("latin-1") for k, v in headers if k.lower() == b"content-type"), None)
        mime_type, encoding = utils.split_content_type(content_type)
        if mime_type is None:
            mime_type = self._operation.consumes[0] if self._operation.consumes else "application/octet-stream"
        return mime_type, encoding or "utf-8"

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        mime_type, _ = self.extract_content_type(scope["headers"])
        if not self._leaves_body(mime_type):
            await super().__call__(scope, receive, send)
            return
        self._parameters.validate(scope)
        self.validate_mime_type(mime_type)
        await self.next_app(scope, receive, send)


class _CheckingApi(RequestValidationAPI):
    def make_operation(self, operation: AbstractOperation) -> CheckedOperation:
        return CheckedOperation(self.next_app, operation=operation, strict_validation=self.strict_validation,
                                 validator_map=self.validator_map)


class Checking(RequestValidationMiddleware):
    api_cls = _CheckingApi


class NamedParameters(ParameterValidator):
    """Connexion's check of path, query and header parameters, its refusal naming the parameter (Connexion says
    only what the value failed, in jsonschema's words). What Connexion makes on every call is made once: a
    parameter's validator (it deep-copies the schema and builds a Draft4Validator for each value it checks, 20 µs
    for a Messages request's `anthropic-version`, which every Anthropic SDK sends); and where no parameter can fail
    (none required, none in the path or a cookie), a request without a query string and without any of the
    parameters' headers is not parsed into the request object Connexion builds to look for them (6 µs): the
    headers that are there are checked as Connexion checks them (the first of a name, in the spec's order)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        every = [p for group in self.parameters.values() for p in group]
        self._headers = {p["name"].lower().encode("latin-1"): p for p in self.parameters.get("header", [])}
        self._none_can_fail = not any(p.get("required") for p in every) and not any(
            self.parameters.get(where) for where in ("path", "cookie"))
        # By id() of the parameter (the spec's own dicts, which Connexion passes back, alive as long as this).
        self._validators = {id(p): Draft4Validator(copy.deepcopy(p.get("schema", p)),
                                                   format_checker=draft4_format_checker) for p in every}

    def validate(self, scope: Any) -> None:
        if not self._none_can_fail or scope.get("query_string"):
            super().validate(scope)
            return
        present: dict[bytes, bytes] = {}
        for name, value in scope["headers"]:
            if name in self._headers:
                present.setdefault(name, value)
        for name, param in self._headers.items():
            if name in present:
                error = self.validate_parameter("header", present[name].decode("latin-1"), param)
                if error:
                    raise BadRequestProblem(detail=error)

    def validate_parameter(self, parameter_type: str, value: Any, param: dict[str, Any],  # type: ignore[override]
                           param_name: str | None = None) -> str | None:
        if value is None or is_nullable(param) and is_null(value):
            return ParameterValidator.validate_parameter(parameter_type, value, param, param_name)
        try:
            self._validators[id(param)].validate(value)
        except ValidationError as exc:
            first = str(exc).splitlines()[0]
            return f"The {parameter_type} parameter {param.get('name', param_name)!r} is not valid: {first}"
        return None


class BodyParsedByRoute:
    """A body 'validator' that leaves the body alone: the generated route validates it with pydantic."""

    def __init__(self, **_: Any) -> None:
        pass

    async def wrap_receive(self, receive: Any, *, scope: Any) -> tuple[Any, Any]:
        return receive, scope
