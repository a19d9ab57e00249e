"""Load the configuration file into the generated Config model, with the embedded defaults filled in.

A bad file fails at startup with a ConfigError naming the file, the path inside it and what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, get_args, get_origin

import pydantic
import yaml

from generated.config import Config, DeploymentSettings, ModelSettings, PolicySettings, PriceSettings, UpstreamSettings
from handlers.config_names import DEFAULT_FILE, ENV_CONFIG, ENV_PREFIX, ConfigError

ECHO_MODEL = "specway/echo"


def _where(loc: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def parse(data: Any, source: str) -> Config:
    if data is None:
        data = {}
    try:
        config = Config.model_validate(_nulls_dropped(Config, data))
    except pydantic.ValidationError as exc:
        lines = [f"{source}: {_where(e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)]
        raise ConfigError("invalid configuration\n  " + "\n  ".join(lines)) from None
    return with_defaults(config, source)


def _nulls_dropped(model: type[pydantic.BaseModel], data: Any) -> Any:
    """A key with no value (`server:` with everything under it commented out) is the key left out: its default.

    Only where the key is a field that has a default; a null anywhere else is still refused by validation.
    """
    if not isinstance(data, dict):
        return data
    out = {}
    for key, value in data.items():
        field = model.model_fields.get(key)
        if field is None or value is not None:
            out[key] = value if field is None else _nulls_dropped_in(field.annotation, value)
        elif field.is_required():
            out[key] = value
    return out


def _nulls_dropped_in(annotation: Any, value: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return _nulls_dropped(annotation, value)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is dict and isinstance(value, dict):
        return {k: _nulls_dropped_in(args[1], v) for k, v in value.items()}
    if origin is list and isinstance(value, list):
        return [_nulls_dropped_in(args[0], v) for v in value]
    return value


def load(path: str | Path | None = None, environ: dict[str, str] | None = None) -> Config:
    """The config at `path`, or at $SPECWAY_CONFIG, or in ./specway.yaml, or the embedded defaults; then the
    SPECWAY_<KEY>__<KEY> environment variables over it."""
    environ = dict(os.environ if environ is None else environ)
    path = path or environ.get(ENV_CONFIG) or (DEFAULT_FILE if Path(DEFAULT_FILE).is_file() else None)
    data, source = ({}, "(embedded defaults)") if not path else (_read(Path(path)), str(path))
    data, names = with_environment(data, environ)
    return parse(data, source + (f" with {', '.join(names)}" if names else ""))


def _read(p: Path) -> Any:
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the configuration file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    return {} if data is None else data


def with_environment(data: Any, environ: dict[str, str]) -> tuple[Any, list[str]]:
    """`data` with every SPECWAY_<KEY>[__<KEY>...] variable whose first key is a top-level key set over it (the value
    read as YAML); other SPECWAY_ variables are not ours to read. Returns the data and the variables applied."""
    if not isinstance(data, dict):
        return data, []
    data, applied = dict(data), []
    for name in sorted(environ):
        if not name.startswith(ENV_PREFIX) or name == ENV_CONFIG:
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX):].split("__")]
        if path[0] not in Config.model_fields or not all(path):
            continue
        try:
            value = yaml.safe_load(environ[name])
        except yaml.YAMLError as exc:
            raise ConfigError(f"{name}: not a valid YAML value: {exc}") from None
        node = data
        for i, key in enumerate(path[:-1]):
            child = node.get(key)
            if not isinstance(child, dict):
                if child is not None:
                    raise ConfigError(f"{name}: {'.'.join(path[: i + 1])} is not a section with keys")
                child = {}
            node[key] = child = dict(child)
            node = child
        node[path[-1]] = value
        applied.append(name)
    return data, applied


def revision(config: Config) -> str:
    """What the decision records call the configuration: 12 hex digits of the SHA-256 of its settings, without the
    store's and Redis' URLs (they may carry passwords, and replicas on one setup agree on everything else)."""
    settings = config.model_dump(mode="json", exclude={"store": {"url"}, "limits": {"redis_url"}})
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def with_defaults(config: Config, source: str) -> Config:
    """Fill in what the file leaves out, then check the references between its parts."""
    if not config.upstreams and not config.models:
        config.upstreams = {"echo": UpstreamSettings(kind="echo")}
        config.models = [ModelSettings(id=ECHO_MODEL, upstream="echo", name="echo", aliases=["echo"], owned_by="specway")]
    if config.default_policy not in config.policies:
        first = config.models[0].id if config.models else None
        config.policies[config.default_policy] = PolicySettings(default_model=first)
    _check(config, source)
    return config


def _check(config: Config, source: str) -> None:
    problems: list[str] = []
    names: dict[str, str] = {}
    for i, m in enumerate(config.models):
        problems += _deployment_problems(f"models.{i}", m, config)
        for name in [m.id, *m.aliases]:
            if name in names:
                problems.append(f"models.{i}: {name!r} is already the id or an alias of {names[name]!r}")
            names[name] = m.id
    for up_name, up in config.upstreams.items():
        if up.kind not in ("echo", "bedrock", "gemini", "vertex") and not up.base_url:
            problems.append(f"upstreams.{up_name}.base_url: required for kind {up.kind}")
        problems += _aws_problems(up_name, up)
        problems += _azure_problems(up_name, up)
        problems += _google_problems(up_name, up)
    for pol_name, pol in config.policies.items():
        refs = [("default_model", pol.default_model)] if pol.default_model else []
        refs += [(f"effort.{tier}", m) for tier, ms in pol.effort.items() for m in ms.root]
        refs += [(f"fallbacks.{k}", m) for k, ms in pol.fallbacks.items() for m in [k, *ms]]
        refs += [(f"weights.{k}", k) for k in pol.weights]
        problems += [f"policies.{pol_name}.{where}: no model or alias {m!r}" for where, m in refs if m not in names]
        problems += _money_problems(f"policies.{pol_name}", pol)
    if problems:
        raise ConfigError("invalid configuration\n  " + "\n  ".join(f"{source}: {p}" for p in problems))


def deployments(model: ModelSettings) -> list[DeploymentSettings]:
    """The deployments of a catalog model: its `deployments`, or the one its `upstream` and `name` say, each with
    its prices over the model's, value by value."""
    if not model.deployments:
        return [DeploymentSettings(upstream=model.upstream or "", name=model.name or "", price=model.price)]
    base = model.price.model_dump()
    return [d.model_copy(update={"price": PriceSettings(**{k: v if v is not None else base[k]
                                                           for k, v in d.price.model_dump().items()})})
            for d in model.deployments]


def _money_problems(where: str, policy: PolicySettings) -> list[str]:
    """A policy's cost ceiling and step-down: amounts that are decimals, a tier the policy has."""
    amounts = [("max_cost", policy.max_cost)]
    problems = []
    if policy.step_down is not None:
        amounts.append(("step_down.credit_below", policy.step_down.credit_below))
        if policy.step_down.tier not in policy.effort:
            problems.append(f"{where}.step_down.tier: the policy has no effort tier {policy.step_down.tier!r}")
    for name, value in amounts:
        if value is None:
            continue
        try:
            ok = Decimal(str(value)) >= 0
        except InvalidOperation:
            ok = False
        if not ok:
            problems.append(f"{where}.{name}: {value!r} is not an amount (a decimal such as \"0.05\")")
    return problems


def _deployment_problems(where: str, m: ModelSettings, config: Config) -> list[str]:
    """A model has `upstream` and `name`, or `deployments` (each on a configured upstream, none twice)."""
    if m.deployments and (m.upstream or m.name):
        return [f"{where}: give either upstream and name, or deployments, not both"]
    if not m.deployments and not (m.upstream and m.name):
        return [f"{where}: needs upstream and name, or deployments"]
    if not m.deployments:
        return [] if m.upstream in config.upstreams else [f"{where}.upstream: no upstream named {m.upstream!r}"]
    problems, seen = [], set()
    for j, d in enumerate(m.deployments):
        if d.upstream not in config.upstreams:
            problems.append(f"{where}.deployments.{j}.upstream: no upstream named {d.upstream!r}")
        if (d.upstream, d.name) in seen:
            problems.append(f"{where}.deployments.{j}: {d.upstream}/{d.name} is already a deployment of {m.id!r}")
        seen.add((d.upstream, d.name))
    return problems


def _aws_problems(name: str, up: UpstreamSettings) -> list[str]:
    """bedrock signs with AWS credentials in its region; region and profile mean nothing to another kind."""
    if up.kind == "bedrock":
        return ([f"upstreams.{name}.region: required for kind bedrock"] if not up.region else []) + (
            [f"upstreams.{name}.api_key_env: kind bedrock signs with AWS credentials, not a key"]
            if up.api_key_env else [])
    return [f"upstreams.{name}.{field}: only kind bedrock takes it" for field in ("region", "profile")
            if getattr(up, field)]


def _google_problems(name: str, up: UpstreamSettings) -> list[str]:
    """vertex signs in with Google credentials in one project and location; those mean nothing to another kind."""
    fields = ("project", "location", "credentials_env")
    if up.kind == "vertex":
        return [f"upstreams.{name}.{field}: required for kind vertex" for field in fields[:2]
                if not getattr(up, field)] + (
            [f"upstreams.{name}.api_key_env: kind vertex signs in with Google credentials, not a key"]
            if up.api_key_env else [])
    return [f"upstreams.{name}.{field}: only kind vertex takes it" for field in fields if getattr(up, field)]


def _azure_problems(name: str, up: UpstreamSettings) -> list[str]:
    """An azure upstream signs in one way, a key or Entra ID; `azure` settings anywhere else would be ignored."""
    if up.kind != "azure":
        return [f"upstreams.{name}.azure: only for kind azure"] if "azure" in up.model_fields_set else []
    if up.azure.entra and up.api_key_env:
        return [f"upstreams.{name}: sign in with api_key_env or azure.entra, not both"]
    if not up.azure.entra and not up.api_key_env:
        return [f"upstreams.{name}: an azure upstream needs api_key_env (its key) or azure.entra (Entra ID)"]
    return []


def api_key(upstream_name: str, settings: UpstreamSettings) -> str | None:
    """The upstream's key, read from the environment variable the config names (never from the file)."""
    if not settings.api_key_env:
        return None
    value = os.environ.get(settings.api_key_env)
    if not value:
        raise ConfigError(
            f"upstreams.{upstream_name}.api_key_env: the environment variable {settings.api_key_env} is not set"
        )
    return value
