"""Flags shared by the sub-commands, and the settings they override (environment first, then flags)."""

from __future__ import annotations

import argparse
from typing import Any

from combee_core.connection import KafkaConnection, env_name, flag_name
from combee_core.settings import CombeeSettings


def add_common(parser: argparse.ArgumentParser, *, run: bool = True, run_id: bool | None = None) -> None:
    """Broker and topic flags; ``run``: also ``--run-id`` and ``--seed`` (``run_id`` alone overrides for
    ``--run-id``: commands that read consumer groups but make no random choice)."""
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (env COMBEE_KAFKA_BOOTSTRAP); none -> the "
                        "broker `combee broker` runs on this machine")
    parser.add_argument("--embedded", action="store_true",
                        help="without --bootstrap: start a throwaway in-memory broker for this command only")
    parser.add_argument("--connect-timeout", dest="broker_connect_timeout_s", type=float,
                        help="seconds to wait for the broker to answer at start (default 5); then exit 2")
    parser.add_argument("--prefix", dest="topic_prefix", help="topic prefix (default combee.)")
    if run if run_id is None else run_id:
        parser.add_argument("--run-id", help="run id, names the consumer groups")
    if run:
        parser.add_argument("--seed", dest="run_seed", type=int, help="run seed")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    add_connection(parser)


CONNECTION_FLAGS: dict[str, str] = {
    "security_protocol": "PLAINTEXT (default), SSL, SASL_PLAINTEXT or SASL_SSL",
    "ssl_cafile": "PEM file of the CA that signed the broker's certificate (default: the system's trust store)",
    "ssl_certfile": "client certificate (PEM) for mutual TLS",
    "ssl_keyfile": "client private key (PEM) for mutual TLS (its password: env COMBEE_KAFKA_SSL_KEY_PASSWORD)",
    "sasl_mechanism": "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER",
    "sasl_username": "SASL user (PLAIN, SCRAM)",
    "sasl_password_file": "file holding the SASL password (or env COMBEE_KAFKA_SASL_PASSWORD)",
    "sasl_oauth_token_file": "OAUTHBEARER: file holding the token, read at every connect",
    "sasl_oauth_token_command": "OAUTHBEARER: command printing a token (or env COMBEE_KAFKA_SASL_OAUTH_TOKEN)",
}
"""The connection flags (``--kafka-<field>``) and their help; secrets themselves have no flag (a command line is
visible to every user of the machine): environment variables or files only."""


def add_connection(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The ``--kafka-*`` flags of the connection to the broker named by ``--bootstrap`` (docs/broker.md)."""
    group = parser.add_argument_group(
        "Kafka connection (TLS, SASL; for --bootstrap's broker; env COMBEE_KAFKA_*; docs/broker.md)"
    ) if isinstance(parser, argparse.ArgumentParser) else parser
    for field, help_text in CONNECTION_FLAGS.items():
        group.add_argument(flag_name(field), dest=f"kafka_{field}", help=f"{help_text} (env {env_name(field)})")
    group.add_argument(flag_name("ssl_check_hostname"), dest="kafka_ssl_check_hostname",
                       action=argparse.BooleanOptionalAction,
                       help=f"check the broker's certificate names its host (default on; env "
                       f"{env_name('ssl_check_hostname')})")


def connection_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The connection settings the ``--kafka-*`` flags given override (as ``CombeeSettings.load``'s ``kafka``)."""
    fields = (*CONNECTION_FLAGS, "ssl_check_hostname")
    assert set(fields) <= set(KafkaConnection.model_fields)
    values = {field: getattr(args, f"kafka_{field}", None) for field in fields}
    return {field: value for field, value in values.items() if value is not None}


def add_pipeline(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *, llm_record: bool = True) -> None:
    parser.add_argument("--batch-size", help="batch size: a number, or 'auto' for the controller")
    parser.add_argument("-p", "--copies", dest="p", type=int, help="copies per reflection in the shuffle (p)")
    parser.add_argument("--subgroups", choices=["sqrt", "single"], help="sqrt (Combee) or single (naive)")
    parser.add_argument("--max-fan-in", type=int, help="most items one LLM call may read")
    parser.add_argument("--max-wait", dest="max_wait_s", type=float, help="close a batch after this many seconds")
    parser.add_argument("--partitions", type=int, help="partitions of scaled topics")
    parser.add_argument("--dedupe-horizon", type=int,
                        help="batched trace ids remembered per playbook to drop resends (default 1000000)")
    parser.add_argument("--model", help="LLM model name for all roles (litellm name, e.g. combee-sim/default)")
    parser.add_argument("--promotion", action="store_const", const=True,
                        help="gate versions: score each candidate on the held-out set, serve only promoted ones "
                        "(env COMBEE_PROMOTION)")
    parser.add_argument("--epsilon", dest="promotion_epsilon", type=float,
                        help="promotion rule: promote when held_out >= incumbent - epsilon (default 0)")
    parser.add_argument("--held-out-sets", dest="held_out_sets", metavar="PLAYBOOK=SET[@V],...",
                        help="the held-out task set each playbook is scored on ('*' for the others; `combee tasks "
                        "add` registers one; env COMBEE_HELD_OUT_SETS, default *=suite)")
    if llm_record:
        parser.add_argument("--llm-record", choices=["off", "record", "replay"],
                            help="record LLM calls to --llm-record-file, or answer them from the record "
                            "(docs/replay.md)")
        parser.add_argument("--llm-record-file", help="JSONL call store for --llm-record")


def add_loss_grace(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--broker-loss-grace", dest="broker_loss_grace_s", type=float,
                        help="seconds without an answer from the broker before stopping with exit 3 (default 60)")


def add_door(parser: argparse.ArgumentParser, *, keys: bool = True) -> None:
    """The flags of an HTTP door's who-and-where checks (docs/operations.md, "Running a door off loopback")."""
    parser.add_argument("--allow-host", dest="allow_host", action="append", metavar="NAME",
                        help="a Host name clients use besides loopback names, IP addresses and --host (repeatable; "
                        "env COMBEE_ALLOWED_HOSTS, comma-separated); any other Host is refused 421")
    parser.add_argument("--tls-cert", dest="http_tls_cert", help="serve HTTPS with this PEM certificate (chain) "
                        "(env COMBEE_HTTP_TLS_CERT; with --tls-key)")
    parser.add_argument("--tls-key", dest="http_tls_key", help="the PEM private key of --tls-cert (env "
                        "COMBEE_HTTP_TLS_KEY)")
    if keys:
        parser.add_argument("--access-keys-file", dest="access_keys_file", help="file of access keys scoped to "
                            "playbooks, one 'NAME sha256:HEX read=... write=...' line each (env "
                            "COMBEE_ACCESS_KEYS_FILE; docs/serving.md, 'Keys')")


def add_otlp(parser: argparse.ArgumentParser) -> None:
    """The OpenTelemetry ingest flags of ``combee worker`` (docs/protocol.md, "OpenTelemetry (OTLP) in")."""
    group = parser.add_argument_group("OpenTelemetry in (env COMBEE_OTLP_*; docs/protocol.md)")
    group.add_argument("--otlp", nargs="?", const="http", choices=["http", "kafka"],
                       help="run ingest-otlp (env COMBEE_OTLP_INGEST=1) and, with 'http' (the default), the OTLP/HTTP "
                       "receiver in this process on --otlp-host:--otlp-port; 'kafka': only the stage, reading what "
                       "a Collector's Kafka exporter writes to --otlp-topic")
    group.add_argument("--otlp-host", dest="otlp_receiver_host",
                       help="address the receiver binds (env COMBEE_OTLP_RECEIVER_HOST, default 127.0.0.1)")
    group.add_argument("--otlp-port", dest="otlp_receiver_port", type=int,
                       help="port of the receiver (env COMBEE_OTLP_RECEIVER_PORT, default 4318; 0: a free one)")
    group.add_argument("--otlp-topic", dest="otlp_topic", help="OTLP topic, no prefix (env COMBEE_OTLP_TOPIC, "
                       "default otlp_spans)")
    group.add_argument("--otlp-default-playbook", dest="otlp_default_playbook",
                       help="playbook of runs whose spans name none (env COMBEE_OTLP_DEFAULT_PLAYBOOK; none: such "
                       "runs are dead letters)")
    group.add_argument("--otlp-feedback-wait", dest="otlp_feedback_wait_s", type=float,
                       help="seconds a finished run without an evaluation waits for one (env "
                       "COMBEE_OTLP_FEEDBACK_WAIT_S, default 300)")
    group.add_argument("--otlp-group-by", dest="otlp_group_by", choices=["trace", "conversation"],
                       help="one trace per OTel trace id or per conversation (env COMBEE_OTLP_GROUP_BY)")


OTLP_FLAGS = ("otlp_receiver_host", "otlp_receiver_port", "otlp_topic", "otlp_default_playbook",
              "otlp_feedback_wait_s", "otlp_group_by")
"""The ``add_otlp`` flags named after their setting (``--otlp`` sets ``otlp_ingest``)."""

DOOR_FLAGS = ("http_tls_cert", "http_tls_key", "access_keys_file")
"""The door flags named after their setting (``--allow-host`` sets ``allowed_hosts``)."""

PIPELINE_FLAGS = ("topic_prefix", "run_id", "run_seed", "p", "subgroups", "max_fan_in", "max_wait_s", "partitions",
                  "dedupe_horizon", "promotion", "promotion_epsilon", "held_out_sets", "llm_record", "llm_record_file",
                  "broker_connect_timeout_s", "broker_loss_grace_s")
"""Flags named after the setting they override (see ``add_common`` and ``add_pipeline``)."""


def flag_overrides(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, Any]:
    """The settings the given flags override: ``names`` as they are, plus ``--bootstrap``, ``--kafka-*``,
    ``--batch-size`` (a number, or ``auto`` for the controller) and ``--model`` (every role). Flags not given are
    left out."""
    overrides = {name: getattr(args, name, None) for name in names}
    overrides["kafka_bootstrap"] = getattr(args, "bootstrap", None)
    overrides["kafka"] = connection_overrides(args) or None
    batch_size = getattr(args, "batch_size", None)
    if batch_size == "auto":
        overrides["auto_batch_size"] = True
    elif batch_size is not None:
        overrides["batch_size"] = batch_size
    if getattr(args, "allow_host", None):
        overrides["allowed_hosts"] = ",".join(args.allow_host)
    model = getattr(args, "model", None)
    if model:
        overrides.update(reflector_model=model, aggregator_model=model, reducer_model=model)
    return {name: value for name, value in overrides.items() if value is not None}


def settings_from_args(args: argparse.Namespace) -> CombeeSettings:
    """Settings from the environment, overridden by the flags given."""
    return CombeeSettings.load(**flag_overrides(args, PIPELINE_FLAGS + DOOR_FLAGS))
