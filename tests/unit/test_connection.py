"""The connection settings (TLS, SASL): where they come from, what every client gets, and that no secret is shown."""

from __future__ import annotations

import ast
import asyncio
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from combee_core.connection import KafkaConnection
from combee_core.settings import CombeeSettings, SettingsError
from streams.broker.connection import ConnectionSettingsError, client_kwargs, run_token_command
from streams.broker.profile import BrokerProfile
from streams.cli import build_parser
from streams.cli.flags import settings_from_args
from streams.testing.certificates import make_certificates, openssl_available
from streams.topology.kafka_clients import consumer_config, producer_config
from tests.hang_guard import SUBPROCESS_HANG_S

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-value-93a1"
SCRAM_ENV = {"COMBEE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "COMBEE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
             "COMBEE_KAFKA_SASL_USERNAME": "alice", "COMBEE_KAFKA_SASL_PASSWORD": SECRET}


def test_connection_settings_come_from_the_environment_and_flags_win():
    parser = build_parser()
    args = parser.parse_args(["status", "--bootstrap", "kafka:9093", "--kafka-sasl-mechanism", "SCRAM-SHA-256",
                              "--no-kafka-ssl-check-hostname"])
    with pytest.MonkeyPatch.context() as patch:
        for name, value in SCRAM_ENV.items():
            patch.setenv(name, value)
        settings = settings_from_args(args)
    assert settings.kafka.security_protocol == "SASL_SSL" and settings.kafka.sasl_username == "alice"
    assert settings.kafka.sasl_mechanism == "SCRAM-SHA-256"  # the flag over the environment
    assert settings.kafka.ssl_check_hostname is False
    assert settings.kafka.password() == SECRET
    assert CombeeSettings.load(env={}).kafka == KafkaConnection()  # PLAINTEXT by default
    assert KafkaConnection().ssl_check_hostname is True


def test_secrets_have_no_flag():
    """A command line is visible to every user of the machine: secrets come from the environment or files."""
    for command in ("worker", "status", "tail", "produce", "demo", "export", "replay", "diff"):
        options = {opt for action in _subparser(command)._actions for opt in action.option_strings}
        assert "--kafka-security-protocol" in options and "--kafka-sasl-password-file" in options, command
        assert not {"--kafka-sasl-password", "--kafka-ssl-key-password", "--kafka-sasl-oauth-token"} & options


def _subparser(name: str):
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return subparsers.choices[name]


@pytest.mark.parametrize(("env", "message"), [
    ({"COMBEE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "SASL_SSL needs COMBEE_KAFKA_SASL_MECHANISM"),
    ({"COMBEE_KAFKA_SSL_CAFILE": "/ca.pem"}, "COMBEE_KAFKA_SSL_CAFILE need(s) COMBEE_KAFKA_SECURITY_PROTOCOL=SSL"),
    ({"COMBEE_KAFKA_SASL_USERNAME": "a"}, "need(s) COMBEE_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT or SASL_SSL"),
    ({**SCRAM_ENV, "COMBEE_KAFKA_SASL_PASSWORD": ""}, "needs exactly one of COMBEE_KAFKA_SASL_PASSWORD or"),
    ({**SCRAM_ENV, "COMBEE_KAFKA_SASL_PASSWORD_FILE": "/p"}, "needs exactly one of COMBEE_KAFKA_SASL_PASSWORD"),
    ({"COMBEE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "COMBEE_KAFKA_SASL_MECHANISM": "OAUTHBEARER"},
     "OAUTHBEARER needs exactly one of COMBEE_KAFKA_SASL_OAUTH_TOKEN"),
    ({"COMBEE_KAFKA_SECURITY_PROTOCOL": "TLS"}, "COMBEE_KAFKA_SECURITY_PROTOCOL (or --kafka-security-protocol)"),
    ({"COMBEE_KAFKA_SECURITY_PROTOCOL": "SSL", "COMBEE_KAFKA_SSL_KEYFILE": "/k"}, "COMBEE_KAFKA_SSL_KEYFILE needs"),
])
def test_inconsistent_connection_settings_are_refused_naming_the_variables(env, message):
    with pytest.raises(SettingsError) as refused:
        CombeeSettings.load(env=env)
    assert message in str(refused.value) and "\n" not in str(refused.value)
    assert SECRET not in str(refused.value)


def test_plaintext_clients_get_only_the_address_and_protocol():
    assert client_kwargs("k:9092", KafkaConnection()) == {"bootstrap_servers": "k:9092",
                                                           "security_protocol": "PLAINTEXT"}


def test_tls_clients_get_a_context_that_checks_the_host_unless_told_not_to():
    context = client_kwargs("k:9093", KafkaConnection(security_protocol="SSL"))["ssl_context"]
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    unchecked = client_kwargs("k:9093", KafkaConnection(security_protocol="SSL", ssl_check_hostname=False))
    assert not unchecked["ssl_context"].check_hostname and unchecked["ssl_context"].verify_mode == ssl.CERT_REQUIRED


def test_a_ca_file_that_cannot_be_loaded_is_one_line_naming_the_variable(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate")
    for cafile in (str(bad), str(tmp_path / "missing.pem")):
        with pytest.raises(ConnectionSettingsError, match="cannot load the CA file COMBEE_KAFKA_SSL_CAFILE="):
            client_kwargs("k:9093", KafkaConnection(security_protocol="SSL", ssl_cafile=cafile))


def test_sasl_clients_get_the_mechanism_user_and_password_from_the_environment_or_a_file(tmp_path):
    kwargs = client_kwargs("k:9093", CombeeSettings.load(env=SCRAM_ENV).kafka)
    assert kwargs["security_protocol"] == "SASL_SSL" and kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_username"] == "alice" and kwargs["sasl_plain_password"] == SECRET
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    secret_file = tmp_path / "password"
    secret_file.write_text(SECRET + "\n")  # as a mounted Kubernetes secret may end
    env = {**SCRAM_ENV, "COMBEE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "COMBEE_KAFKA_SASL_PASSWORD": "",
           "COMBEE_KAFKA_SASL_PASSWORD_FILE": str(secret_file)}
    kwargs = client_kwargs("k:9092", CombeeSettings.load(env=env).kafka)
    assert kwargs["sasl_plain_password"] == SECRET and "ssl_context" not in kwargs


async def test_oauthbearer_tokens_come_from_the_environment_a_file_read_at_each_connect_or_a_command(tmp_path):
    base = {"security_protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}
    provider = client_kwargs("k:9093", KafkaConnection(**base, sasl_oauth_token=SECRET))["sasl_oauth_token_provider"]
    assert await provider.token() == SECRET
    token_file = tmp_path / "token"
    token_file.write_text("first\n")
    provider = client_kwargs("k:9093", KafkaConnection(**base, sasl_oauth_token_file=str(token_file)))[
        "sasl_oauth_token_provider"]
    assert await provider.token() == "first"
    token_file.write_text("rotated\n")
    assert await provider.token() == "rotated"
    command = f"{sys.executable} -c \"print('from-command')\""
    provider = client_kwargs("k:9093", KafkaConnection(**base, sasl_oauth_token_command=command))[
        "sasl_oauth_token_provider"]
    assert await provider.token() == "from-command"
    from combee_core.connection import ConnectionSecretError

    with pytest.raises(ConnectionSecretError, match="exited with status 3 and no token"):
        await run_token_command(f"{sys.executable} -c \"import sys; print('{SECRET}', file=sys.stderr); sys.exit(3)\"")


def test_producer_and_consumer_settings_carry_the_profiles_connection():
    connection = CombeeSettings.load(env=SCRAM_ENV).kafka
    profile = BrokerProfile.for_kafka().with_connection(connection)
    for config in (producer_config("k:9093", profile), consumer_config("k:9093", profile, "g")):
        assert config["security_protocol"] == "SASL_SSL" and config["sasl_plain_password"] == SECRET
        assert config["bootstrap_servers"] == "k:9093"
    assert producer_config("k:9092", BrokerProfile.for_tansu())["security_protocol"] == "PLAINTEXT"


async def test_the_configured_broker_gets_the_connection_and_a_local_broker_stays_plaintext(monkeypatch):
    from streams.broker import handshake
    from streams.cli.running import broker_for

    seen = []

    async def answering(bootstrap, timeout_s, *, connection):
        seen.append(connection)

    monkeypatch.setattr(handshake, "check_broker", answering)
    settings = CombeeSettings.load(env={**SCRAM_ENV, "COMBEE_KAFKA_BOOTSTRAP": "k:9093", "COMBEE_BROKER_KIND": "kafka"})
    async with broker_for(settings) as (bootstrap, profile):
        assert bootstrap == "k:9093" and profile.connection == settings.kafka == seen[0]
    assert settings.kafka.security_protocol == "SASL_SSL"


async def test_security_settings_a_local_broker_would_not_use_are_refused_in_one_line(monkeypatch, tmp_path):
    """No bootstrap, a `combee broker` running here (plaintext on loopback) and a full SASL_SSL configuration: the
    command refuses (exit 2) instead of connecting in plaintext; without security settings it uses the broker."""
    import os

    from combee_core.connection import UnusedSecuritySettings
    from streams.broker import handshake
    from streams.broker.state import BrokerRecord, write_record
    from streams.cli.running import broker_for

    monkeypatch.setenv("COMBEE_STATE_DIR", str(tmp_path))
    write_record(BrokerRecord.now("127.0.0.1:1", "memory://tansu/", pid=os.getpid()))
    asked: list[str] = []

    async def answering(bootstrap, timeout_s, *, connection):
        asked.append(bootstrap)
        raise ConnectionRefusedError("stop here")

    monkeypatch.setattr(handshake, "check_broker", answering)
    for embedded in (False, True):
        with pytest.raises(UnusedSecuritySettings) as refused:
            async with broker_for(CombeeSettings.load(env=SCRAM_ENV), embedded=embedded):
                pass
        message = str(refused.value)
        assert "\n" not in message and refused.value.exit_code == 2 and SECRET not in message
        assert all(name in message for name in SCRAM_ENV) and "COMBEE_KAFKA_BOOTSTRAP" in message
    assert asked == []  # refused before any connection
    with pytest.raises(ConnectionRefusedError):
        async with broker_for(CombeeSettings.load(env={})):
            pass
    assert asked == ["127.0.0.1:1"]
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("COMBEE_")}, **SCRAM_ENV,
           "COMBEE_STATE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "streams.cli", "status"], env=env, capture_output=True, text=True,
                          cwd=ROOT, timeout=SUBPROCESS_HANG_S)
    assert done.returncode == 2 and done.stdout == "" and SECRET not in done.stderr
    assert done.stderr.strip().startswith("combee status: COMBEE_KAFKA_SECURITY_PROTOCOL")
    assert len(done.stderr.strip().splitlines()) == 1 and "Using the broker" not in done.stderr


CLIENT_CLASSES = {"AIOKafkaProducer", "AIOKafkaConsumer", "GaplessConsumer", "AIOKafkaAdminClient", "AIOKafkaClient"}
CONNECTION_BUILDERS = {"client_kwargs", "consumer_config", "producer_config"}
TAKES_CONNECTION = {"create_topics", "list_topics", "ensure_topics", "require_run_topics", "BrokerWatchdog",
                    "kafka_answers", "wait_for_broker", "check_broker", "profile_for", "detect_profile"}


def _calls(paths):
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                yield path, node, name


def test_every_kafka_client_the_project_builds_gets_its_arguments_from_the_one_connection_builder():
    """Statically, over streams/, bench/ and combee_client/: each aiokafka client is built with
    ``**client_kwargs(...)`` (or the producer/consumer configs made with it), nothing sets ``bootstrap_servers`` by
    hand, and every helper that makes its own client is handed the connection."""
    files = [p for d in ("streams", "bench", "combee_client") for p in (ROOT / d).rglob("*.py")]
    assert len(files) > 50
    problems = []
    for path, node, name in _calls(files):
        where = f"{path.relative_to(ROOT)}:{node.lineno}"
        if any(k.arg == "bootstrap_servers" for k in node.keywords):
            problems.append(f"{where}: bootstrap_servers set by hand")
        if name in CLIENT_CLASSES:
            spread = [k.value for k in node.keywords if k.arg is None]
            built = {getattr(getattr(v, "func", None), "id", None) for v in spread for v in [v, *ast.walk(v)]}
            if not built & CONNECTION_BUILDERS:
                problems.append(f"{where}: {name} not built from client_kwargs/consumer_config/producer_config")
        given = any(k.arg == "connection" for k in node.keywords) or (
            name in ("profile_for", "detect_profile") and len(node.args) >= 2 + (name == "profile_for"))
        if isinstance(node.func, ast.Name) and name in TAKES_CONNECTION and not given:
            problems.append(f"{where}: {name}(...) without connection=")
    assert not problems, "\n".join(problems)


def test_no_secret_shows_in_the_settings_repr_their_description_or_a_run_archive():
    from streams.runs.replay import run_header

    env = {**SCRAM_ENV, "COMBEE_LLM_API_KEY": SECRET + "-llm"}
    settings = CombeeSettings.load(env=env)
    oauth = KafkaConnection(security_protocol="SASL_SSL", sasl_mechanism="OAUTHBEARER", sasl_oauth_token=SECRET)
    tls = KafkaConnection(security_protocol="SSL", ssl_certfile="/c.pem", ssl_key_password=SECRET)
    shown = [repr(settings), str(settings), settings.model_dump_json(), settings.kafka.describe(), repr(oauth),
             oauth.model_dump_json(), oauth.describe(), repr(tls), tls.describe(),
             run_header(settings, ["traces"]).model_dump_json()]
    assert not [text for text in shown if SECRET in text]
    header = run_header(settings, ["traces"]).settings
    assert "kafka" not in header and "llm_api_key" not in header and "kafka_bootstrap" not in header


def test_the_watchdog_probe_speaks_tls_when_the_connection_does(monkeypatch):
    from streams.broker import probe

    contexts = []

    async def answering(host, port, timeout_s, context=None, **_):
        contexts.append(context)
        return True

    monkeypatch.setattr(probe, "api_versions", answering)
    assert asyncio.run(probe.kafka_answers("k:9093", connection=KafkaConnection(security_protocol="SSL")))
    assert asyncio.run(probe.kafka_answers("k:9092"))
    assert isinstance(contexts[0], ssl.SSLContext) and contexts[1] is None


@pytest.mark.skipif(not openssl_available(), reason="needs the openssl command to make test certificates")
async def test_a_certificate_that_does_not_name_the_host_is_one_line_saying_so(tmp_path):
    from streams.broker.errors import BrokerHandshakeFailed
    from streams.broker.handshake import check_security
    from streams.testing.tls_proxy import TlsProxy, server_context

    certs = make_certificates(tmp_path, "unused")
    with TlsProxy(server_context(certs.server_cert, certs.server_key), ("127.0.0.1", 1), host="0.0.0.0") as proxy:
        connection = KafkaConnection(security_protocol="SSL", ssl_cafile=str(certs.ca))
        with pytest.raises(BrokerHandshakeFailed) as refused:  # the certificate names localhost and 127.0.0.1 only
            await check_security(f"127.0.0.2:{proxy.port}", connection, time.monotonic() + 10)
    assert "IP address mismatch" in str(refused.value) and "COMBEE_KAFKA_SSL_CHECK_HOSTNAME=false" in str(refused.value)
