"""Deployment files checked without a Docker engine: compose, Kubernetes manifests and the Dockerfile agree with the
code (real sub-commands, flags and stage names; one image; the same COMBEE_* settings; ``combee`` as entry point)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

from combee_core.connection import CONNECTION_ENV_PREFIX, SECRET_FIELDS, env_name
from combee_core.settings import ENV_PREFIX, CombeeSettings
from combee_core.topology import TOPICS, stage_spec
from streams.cli import build_parser
from streams.topology.worker import parse_stages

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
K8S = ROOT / "deploy" / "k8s"
COMBEE_SERVICES = ("reflector", "batcher", "aggregator", "reducer", "demo", "worker-cli")
WORKER_SERVICES = ("reflector", "batcher", "aggregator", "reducer")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def k8s_docs() -> list[dict]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs.extend(doc for doc in yaml.safe_load_all(path.read_text()) if doc)
    return docs


def _deployments(docs: list[dict]) -> list[dict]:
    return [doc for doc in docs if doc["kind"] == "Deployment"]


def _check_combee_args(args: list[str]) -> None:
    """The arguments parse as a real `combee` command line (sub-command and flags), with real stage names."""
    assert all(isinstance(a, str) for a in args), f"every argument must be a string: {args}"
    parsed = build_parser().parse_args(args)  # SystemExit (failing the test) on an unknown sub-command or flag
    if parsed.command == "worker":
        assert parse_stages(parsed.stages)  # UnknownStageError on a wrong stage name
        assert parsed.health_port == 8080, f"workers must serve health on 8080: {args}"


def test_compose_parses_with_kafka_in_kraft_mode_and_every_combee_service(compose):
    kafka = compose["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    assert "controller" in kafka["environment"]["KAFKA_PROCESS_ROLES"]
    assert "1@kafka:9093" == kafka["environment"]["KAFKA_CONTROLLER_QUORUM_VOTERS"]
    assert int(kafka["environment"]["KAFKA_MESSAGE_MAX_BYTES"]) >= 8 * 1024 * 1024
    assert set(COMBEE_SERVICES) <= set(compose["services"])


def test_compose_commands_are_real_combee_commands_and_stages(compose):
    for name in COMBEE_SERVICES:
        _check_combee_args(compose["services"][name]["command"])
    stages = set()
    for name in WORKER_SERVICES:
        command = compose["services"][name]["command"]
        stages.update(parse_stages(command[command.index("--stages") + 1]))
    assert stages == set(parse_stages(None)), "the worker services together must run every stage"
    demo = build_parser().parse_args(compose["services"]["demo"]["command"])
    assert demo.command == "demo" and demo.bootstrap == "kafka:9092"


def test_compose_settings_are_real_combee_settings_and_load(compose):
    env = compose["x-combee-env"]
    fields = {ENV_PREFIX + name.upper() for name in CombeeSettings.model_fields}
    assert set(env) <= fields, f"not settings: {set(env) - fields}"
    resolved = {k: re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", str(v)) for k, v in env.items()}  # compose defaults
    settings = CombeeSettings.load(env=resolved)
    assert settings.kafka_bootstrap == "kafka:9092"
    for name in COMBEE_SERVICES:
        assert compose["services"][name]["environment"] == env, f"{name} must use the shared settings"


def test_k8s_manifests_use_the_compose_image_settings_and_commands(compose, k8s_docs):
    image = compose["services"]["reflector"]["image"]
    assert {compose["services"][name]["image"] for name in COMBEE_SERVICES} == {image}
    configmaps = [doc for doc in k8s_docs if doc["kind"] == "ConfigMap"]
    assert len(configmaps) == 1
    pipeline = {name for name in configmaps[0]["data"] if not _connection_variable(name)}
    assert pipeline == set(compose["x-combee-env"]), "k8s and compose must set the same variables"

    deployments = _deployments(k8s_docs)
    stages = set()
    partitions = int(configmaps[0]["data"]["COMBEE_PARTITIONS"])
    for deployment in deployments:
        spec = deployment["spec"]
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
        assert 1 <= spec["replicas"] <= partitions
        (container,) = spec["template"]["spec"]["containers"]
        assert container["image"] == image
        _check_combee_args(container["args"])
        stages.update(parse_stages(container["args"][container["args"].index("--stages") + 1]))
        refs = [source.get("configMapRef", {}).get("name") for source in container["envFrom"]]
        assert configmaps[0]["metadata"]["name"] in refs
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
        if "batch" in container["args"][container["args"].index("--stages") + 1]:
            assert spec["replicas"] == 1, "one batcher: only one group member receives the control partition"
    assert stages == set(parse_stages(None)), "the deployments together must run every stage"

    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(p.name for p in K8S.glob("*.yaml")
                                                        if p.name != "kustomization.yaml")


def test_dockerfile_entrypoint_is_combee_and_installs_the_package():
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    assert instructions[0].startswith("FROM python:3.11")
    entrypoints = [line for line in instructions if line.startswith("ENTRYPOINT")]
    assert len(entrypoints) == 1 and json.loads(entrypoints[0].removeprefix("ENTRYPOINT")) == ["combee"]
    cmd = [line for line in instructions if line.startswith("CMD")]
    _check_combee_args(json.loads(cmd[-1].removeprefix("CMD")))
    assert any(line.startswith("RUN pip install .") for line in instructions)
    copied = {shlex.split(line)[1] for line in instructions if line.startswith("COPY")}
    for needed in ("pyproject.toml", "combee_core", "streams", "schemas"):
        assert needed in copied, f"the image needs {needed}"
        assert (ROOT / needed).exists()
    assert any(line.startswith("USER") and "root" not in line for line in instructions)


def _connection_variable(name: str) -> bool:
    """A variable of the connection's security (COMBEE_KAFKA_* but the bootstrap)."""
    return name.startswith(CONNECTION_ENV_PREFIX) and name != "COMBEE_KAFKA_BOOTSTRAP"


SECRET_VARIABLES = {env_name(field) for field in SECRET_FIELDS}


def test_k8s_workers_reach_kafka_over_sasl_ssl_with_every_credential_from_a_secret(k8s_docs):
    """The ConfigMap holds the connection settings but no secret; each worker reads the user name from the Secret and
    mounts it where the ConfigMap's password and CA files are; the settings load (a worker would start)."""
    (configmap,) = [doc for doc in k8s_docs if doc["kind"] == "ConfigMap"]
    data = configmap["data"]
    assert not SECRET_VARIABLES & set(data), "secrets belong in a Secret, not a ConfigMap"
    files = [data[name] for name in data if _connection_variable(name) and name.endswith(("_FILE", "_CAFILE"))]
    assert files
    for deployment in _deployments(k8s_docs):
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        from_secret = {item["name"]: item["valueFrom"]["secretKeyRef"] for item in container.get("env", [])
                       if "secretKeyRef" in item.get("valueFrom", {})}
        assert set(from_secret) == {"COMBEE_KAFKA_SASL_USERNAME"}
        assert not any("value" in item for item in container.get("env", [])), "no literal values next to secrets"
        secrets = {volume["name"]: volume["secret"]["secretName"] for volume in pod["volumes"] if "secret" in volume}
        mounts = {mount["mountPath"]: mount["name"] for mount in container["volumeMounts"]}
        for path in files:
            mounted = [m for m in mounts if path.startswith(m.rstrip("/") + "/")]
            assert mounted and secrets[mounts[mounted[0]]] == from_secret["COMBEE_KAFKA_SASL_USERNAME"]["name"], path
        assert all(m["readOnly"] for m in container["volumeMounts"])
        assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsUser"]  # 0440 files readable
        settings = CombeeSettings.load(env={**data, "COMBEE_KAFKA_SASL_USERNAME": "combee"})
        assert settings.kafka.security_protocol == "SASL_SSL" and settings.kafka.ssl_check_hostname


def test_the_secure_compose_override_reaches_kafka_over_sasl_ssl_with_secrets_as_files(compose):
    override = yaml.safe_load((ROOT / "docker-compose.secure.yml").read_text())
    declared = set(override["secrets"])
    for name in WORKER_SERVICES + ("worker-cli",):
        service = override["services"][name]
        assert name in compose["services"]
        env = {**compose["x-combee-env"], **service["environment"]}
        assert not SECRET_VARIABLES & set(env)
        # compose interpolation: ${VAR:-default} -> its default; ${VAR:?message} (required) -> a value the user gives
        resolved = {k: re.sub(r"\$\{\w+:([-?])([^}]*)\}", lambda m: m.group(2) if m.group(1) == "-" else "given",
                              str(v)) for k, v in env.items()}
        settings = CombeeSettings.load(env=resolved)
        assert settings.kafka.security_protocol == "SASL_SSL" and settings.kafka.sasl_mechanism == "SCRAM-SHA-512"
        mounted = {f"/run/secrets/{secret}" for secret in service["secrets"]}
        assert set(service["secrets"]) <= declared
        assert {settings.kafka.sasl_password_file, settings.kafka.ssl_cafile} <= mounted
    assert all(spec["file"].startswith("deploy/secrets/") for spec in override["secrets"].values())
    assert "deploy/secrets/" in (ROOT / ".gitignore").read_text().splitlines()


README = ROOT / "deploy" / "README.md"


def _stages_in(args: list[str]) -> tuple[str, ...]:
    return parse_stages(args[args.index("--stages") + 1])


def _stage_groups() -> dict[str, tuple[str, str]]:
    """deploy/README.md's table of stage groups: group -> (its --stages, what bounds it)."""
    text = README.read_text()
    rows = {}
    for line in text[text.index("## Stage groups"):].splitlines()[4:]:
        if not line.startswith("|"):
            break
        group, stages, _replicas, bounded_by = (cell.strip() for cell in line.strip().strip("|").split("|"))
        rows[group] = (stages.strip("`"), bounded_by)
    return rows


def test_stage_groups_run_the_same_stages_everywhere_and_are_described_by_the_topology(compose):
    """Each group's stages are the same in deploy/README.md, compose and its manifest; what the README and the
    manifest say bounds it (its input topic's partitions, LLM calls) follows combee_core/topology.py."""
    groups = _stage_groups()
    assert set(groups) == set(WORKER_SERVICES)
    for group, (stages_cell, bounded_by) in groups.items():
        stages = parse_stages(stages_cell)
        assert _stages_in(compose["services"][group]["command"]) == stages, group
        manifest = (K8S / f"{group}.yaml").read_text()
        (deployment,) = _deployments([doc for doc in yaml.safe_load_all(manifest) if doc])
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert _stages_in(container["args"]) == stages, group
        header = manifest.splitlines()[0]
        assert f'running the stage(s) "{",".join(stages)}"' in header, header
        specs = [stage_spec(name) for name in stages]
        first_input = specs[0].consumes[0]
        assert f"`{first_input}`" in bounded_by and f"{first_input} topic" in header, group
        llm = any(spec.llm for spec in specs)
        assert ("LLM calls" in bounded_by) == llm and ("LLM-bound" in header) == llm, group


def test_retention_advice_names_every_topic_as_the_topology_declares_it():
    text = README.read_text()
    bullet = text[text.index("- **Retention:**"):].split("\n- ")[0]
    state_part = bullet.split("are state")[0]
    finite_part = bullet.split("may have a finite retention")[0].rsplit(". ", 1)[-1]
    assert set(re.findall(r"`([a-z_-]+)`", state_part)) == {spec.name for spec in TOPICS if spec.state}
    assert set(re.findall(r"`([a-z_-]+)`", finite_part)) == {spec.name for spec in TOPICS if not spec.state}


def _published(entry: str | dict) -> tuple[str | None, int]:
    """A compose ``ports`` entry as (host address or None for every interface, container port)."""
    if isinstance(entry, dict):
        return entry.get("host_ip"), int(entry["target"])
    parts = str(entry).split(":")
    return (parts[0] if len(parts) == 3 else None), int(parts[-1].split("/")[0])


def _listener_protocols(env: dict) -> dict[int, str]:
    """Kafka's listeners by port: ``KAFKA_LISTENERS`` names, mapped to their security protocol."""
    protocols = dict(item.split(":", 1) for item in env.get("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "").split(",")
                     if ":" in item)
    return {int(address.rsplit(":", 1)[1]): protocols.get(address.split("://")[0], address.split("://")[0])
            for address in env.get("KAFKA_LISTENERS", "").split(",") if address}


def test_no_compose_file_publishes_an_unauthenticated_listener_beyond_loopback():
    """A port published on every interface must ask who connects (a SASL listener); a plaintext, unauthenticated
    Kafka listener is published on 127.0.0.1 only."""
    for path in sorted(ROOT.glob("docker-compose*.yml")):
        for name, service in (yaml.safe_load(path.read_text()).get("services") or {}).items():
            protocols = _listener_protocols(service.get("environment") or {}) if isinstance(service, dict) else {}
            for entry in (service.get("ports") or []) if isinstance(service, dict) else []:
                host, port = _published(entry)
                if protocols.get(port, "").startswith("SASL_"):
                    continue
                assert host in ("127.0.0.1", "::1", "localhost"), (
                    f"{path.name}: {name} publishes port {port} ({protocols.get(port, 'no authentication')}) on "
                    "every interface; bind it to 127.0.0.1 or give it a SASL listener")
