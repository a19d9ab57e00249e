"""The deployment files agree with the gateway and with each other: the Kubernetes manifests validate against the
Kubernetes API's schemas (the ones kubernetes-validate bundles: no network, no cluster), compose.yaml and the
manifests configure a gateway that starts, and every file names the port, user, paths and drain time the image has.
The image itself is built and run by tests/test_container.py."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from generated.config import Server
from handlers import config as config_mod
from tests.deploy_support import ROOT, Dockerfile, compose, project_version, systemd_unit
from tests.docs_support import block

K8S = ROOT / "deploy" / "kubernetes"
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())  # a release still supported, and the newest known
DRAIN = float(Server().drain_seconds)


def manifests() -> dict[str, dict[str, Any]]:
    """The kustomization's resources, by kind."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    found = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            found[doc["kind"]] = doc
    return found


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_the_kubernetes_manifests_validate(version: str) -> None:
    every = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]) == every
    for name in every:
        for doc in yaml.safe_load_all((K8S / name).read_text()):
            kubernetes_validate.validate(doc, version, strict=True)  # raises, naming the field, when invalid


def test_a_manifest_with_a_mistake_is_refused() -> None:
    """The validation can fail: a field of the wrong type, and one the schema does not have (strict)."""
    deployment = manifests()["Deployment"]
    wrong = {**deployment, "spec": {**deployment["spec"], "replicas": "two"}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong, K8S_VERSIONS[0], strict=True)
    unknown = {**deployment, "spec": {**deployment["spec"], "replica": 2}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(unknown, K8S_VERSIONS[0], strict=True)


def test_the_manifests_fit_together_and_fit_the_image() -> None:
    found, image = manifests(), Dockerfile.read()
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    deployment, pod = found["Deployment"], found["Deployment"]["spec"]["template"]
    container = pod["spec"]["containers"][0]
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels == found["Service"]["spec"]["selector"] == \
        found["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]
    assert found["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    port = container["ports"][0]
    assert f"{port['containerPort']}" == image.one("EXPOSE") and found["Service"]["spec"]["ports"][0][
        "targetPort"] == port["name"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"] and container["resources"]["requests"]
    # the user the image creates, never root; more time to stop than the gateway drains
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] and f"--uid {security['runAsUser']} " in " ".join(r for _, r in image.final)
    assert pod["spec"]["terminationGracePeriodSeconds"] > DRAIN
    # the configuration: the ConfigMap mounted where the image reads it, the store's URL from a Secret, the rest
    # from the kustomization's generated ConfigMap
    env = {e["name"]: e for e in container["env"]}
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert env["SPECWAY_CONFIG"]["value"] == image.env()["SPECWAY_CONFIG"] == f"{mount['mountPath']}/specway.yaml"
    assert env["SPECWAY_STORE__URL"]["valueFrom"]["secretKeyRef"]["name"] == "specway-store"
    generated = {g["name"]: g for g in kustomization["configMapGenerator"]}
    assert {r["configMapRef"]["name"] for r in container["envFrom"] if "configMapRef" in r} == set(generated)
    assert kustomization["images"][0]["name"] == container["image"]
    assert kustomization["images"][0]["newTag"] == project_version()
    for secret in ("specway-store", "specway-providers"):
        assert f"kubectl create secret generic {secret}" in (K8S / "kustomization.yaml").read_text()


def test_the_kubernetes_configuration_is_one_the_gateway_takes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    found = manifests()
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    environ = dict(item.split("=", 1) for item in kustomization["configMapGenerator"][0]["literals"])
    environ["SPECWAY_STORE__URL"] = "postgresql://specway:secret@postgres:5432/specway"  # the Secret's
    config_file = tmp_path / "specway.yaml"
    config_file.write_text(found["ConfigMap"]["data"]["specway.yaml"])
    cfg = config_mod.load(config_file, environ)
    assert cfg.server.host == "0.0.0.0" and cfg.server.workers == 2 and cfg.store.url.startswith("postgresql://")
    assert cfg.limits.redis_url == "redis://redis:6379/0"
    for name, upstream in cfg.upstreams.items():  # every key variable comes from the providers' Secret
        monkeypatch.setenv(upstream.api_key_env or "", "k")
        assert config_mod.api_key(name, upstream) == "k"


def test_the_dockerfile_is_multi_stage_slim_non_root_and_checks_readiness() -> None:
    image = Dockerfile.read()
    assert len(image.stages) == 2 and image.base().endswith("-slim-bookworm")
    assert image.one("USER") == "specway" and image.one("STOPSIGNAL") == "SIGTERM"
    assert "/readyz" in image.one("HEALTHCHECK")
    assert image.exec_form("ENTRYPOINT") == ["specway"] and image.exec_form("CMD") == ["serve"]
    assert next(r for w, r in image.final if w == "COPY").startswith("--from=build /opt/specway")
    # build-time access to an index goes through secret mounts only: no ARG, ENV or COPY of pip's settings
    text = (ROOT / "Dockerfile").read_text()
    assert "--mount=type=secret,id=pip.conf" in text and "--mount=type=secret,id=ca.pem" in text
    for word, rest in (i for stage in image.stages for i in stage):
        if word in ("ARG", "ENV", "COPY", "ADD"):
            assert "pip" not in rest.lower() and "cert" not in rest.lower() and ".pem" not in rest, (word, rest)
    # the configuration the image ships is one the gateway takes, listening beyond loopback
    shipped = config_mod.load(ROOT / "deploy" / "container" / "specway.yaml", {})
    assert shipped.server.host == "0.0.0.0" and f"{shipped.server.port}" == image.one("EXPOSE")


def test_compose_runs_the_image_on_postgres_redis_and_a_collector() -> None:
    services = compose()["services"]
    image, gw = Dockerfile.read(), services["specway"]
    assert gw["build"] == "." and gw["image"] == f"specway:{project_version()}"
    assert {"postgres", "redis", "otel-collector"} <= set(services) and set(gw["depends_on"]) == {
        "postgres", "redis", "otel-collector"}
    environ = {name: str(value) for name, value in gw["environment"].items()}
    cfg = config_mod.load(ROOT / "deploy" / "container" / "specway.yaml", environ)  # over the mounted file
    assert urlsplit(cfg.store.url).hostname == "postgres" and urlsplit(cfg.store.url).port == 5432
    assert urlsplit(cfg.limits.redis_url or "").hostname == "redis"
    otlp = urlsplit(cfg.telemetry.otlp_endpoint or "")
    assert otlp.hostname == "otel-collector"
    collector = yaml.safe_load((ROOT / "deploy" / "otel-collector.yaml").read_text())
    assert collector["receivers"]["otlp"]["protocols"]["http"]["endpoint"].endswith(f":{otlp.port}")
    assert [v.split(":")[1] for v in services["otel-collector"]["volumes"]] == ["/etc/otelcol/config.yaml"]
    source, target, _ = gw["volumes"][0].split(":")
    assert (ROOT / source).is_file() and target == image.env()["SPECWAY_CONFIG"]
    assert gw["ports"] == [f"{cfg.server.port}:{image.one('EXPOSE')}"]
    assert _seconds(gw["stop_grace_period"]) > DRAIN
    postgres = services["postgres"]["environment"]
    assert cfg.store.url == (f"postgresql://{postgres['POSTGRES_USER']}:{postgres['POSTGRES_PASSWORD']}@postgres:5432/"
                             f"{postgres['POSTGRES_DB']}")
    with_password = compose({"POSTGRES_PASSWORD": "s3cret"})["services"]
    assert "s3cret@" in with_password["specway"]["environment"]["SPECWAY_STORE__URL"]


def _seconds(text: str) -> float:
    unit = {"s": 1, "m": 60}[text[-1]]
    return timedelta(seconds=float(text[:-1]) * unit).total_seconds()


def test_the_systemd_unit() -> None:
    unit, image = systemd_unit(), Dockerfile.read()
    service = unit["Service"]
    assert service["ExecStart"] == "/opt/specway/bin/specway serve" and service["User"] == "specway"
    assert service["KillSignal"] == "SIGTERM" and float(service["TimeoutStopSec"]) > DRAIN
    assert service["Environment"] == f"SPECWAY_CONFIG={image.env()['SPECWAY_CONFIG']}"
    assert service["EnvironmentFile"].startswith("-") and service["Restart"] == "on-failure"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_no_deployment_file_holds_a_secret() -> None:
    """Passwords and keys come from the environment or Secrets; the only one written down is compose's local
    default, which `POSTGRES_PASSWORD` replaces."""
    for path in [*K8S.glob("*.yaml"), ROOT / "compose.yaml", ROOT / "Dockerfile", *Path(ROOT / "deploy").rglob("*")]:
        if path.is_file():
            text = path.read_text()
            assert "sk-sw-" not in text and "PRIVATE KEY" not in text, path


# --- docs/deployment.md: its commands need a Docker daemon, systemd or a cluster, none of which runs here; what they
# name is checked against the files they use (the image itself is built and run by tests/test_container.py)


def test_the_docker_commands_name_what_the_image_has() -> None:
    image, words = Dockerfile.read(), block("docker-build").split()
    tag = words[words.index("-t") + 1]
    assert tag == compose()["services"]["specway"]["image"] and words[words.index("build") + 3] == "."
    container = words[words.index("-p") + 1].split(":")[1]
    assert container == image.one("EXPOSE")
    assert words[words.index("-v") + 1].split(":")[1] == json.loads(image.one("VOLUME"))[0]
    assert float(words[words.index("--stop-timeout") + 1]) > DRAIN
    secrets = re.findall(r"--secret id=([\w.]+),src=", block("docker-build-secrets"))
    assert secrets == re.findall(r"--mount=type=secret,id=([\w.]+)", (ROOT / "Dockerfile").read_text())


def test_the_compose_commands_set_what_compose_reads() -> None:
    exported = set(re.findall(r"(\w+)=", block("compose-up").splitlines()[0]))
    assert exported == set(re.findall(r"\$\{(\w+)", (ROOT / "compose.yaml").read_text()))
    notice = block("first-key").splitlines()[0]  # what serve prints, as tests/test_readme.py checks
    for name in ("compose-up", "systemd", "kubernetes"):
        assert 'grep -A1 "first relay key"' in block(name) and "first relay key" in notice


def test_the_systemd_commands_install_what_the_unit_runs() -> None:
    text, service = block("systemd"), systemd_unit()["Service"]
    assert service["ExecStart"].split()[0] == "/opt/specway/bin/specway" and "python3 -m venv /opt/specway" in text
    assert f"install -m 0644 specway.yaml {service['Environment'].split('=', 1)[1]}" in text
    assert f"install -m 0600 /dev/null {service['EnvironmentFile'].lstrip('-')}" in text
    source = re.search(r"install -m 0644 (deploy/systemd/\S+) /etc/systemd/system/", text)
    assert source and (ROOT / source[1]).is_file() and "useradd --system" in text and service["User"] in text


def test_the_kubernetes_commands_make_the_secrets_the_deployment_reads() -> None:
    text, container = block("kubernetes"), manifests()["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    made = {name: set(re.findall(r"--from-literal=(\w+)=", rest))
            for name, rest in re.findall(r"create secret generic ([\w-]+)((?:\s+\\?\s*--from-literal=\S+)+)", text)}
    store = next(e["valueFrom"]["secretKeyRef"] for e in container["env"] if e["name"] == "SPECWAY_STORE__URL")
    assert store["key"] in made[store["name"]]
    providers = next(r["secretRef"]["name"] for r in container["envFrom"] if "secretRef" in r)
    config = yaml.safe_load(manifests()["ConfigMap"]["data"]["specway.yaml"])
    assert made[providers] == {u["api_key_env"] for u in config["upstreams"].values()}
    assert "kubectl apply -k deploy/kubernetes" in text and (ROOT / "deploy/kubernetes/kustomization.yaml").is_file()
