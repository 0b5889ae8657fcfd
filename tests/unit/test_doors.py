"""Who and where at the HTTP doors, as pure decisions: the Host and Origin a door answers, access keys scoped to
playbooks (parsing, hashing, what a key may read and write), and an OTLP request checked against its sender's key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from combee_core.otlp.ingest_scope import ScopeRefused, enforce_write_scope
from combee_core.otlp.mapping import PLAYBOOK_ID
from combee_core.otlp.wire import iter_spans, proto_messages
from combee_core.serve.access_keys import OPEN, AccessKeyError, KeyRing, digest, new_secret
from combee_core.serve.doors import DoorConfigError, DoorPolicy, parse_hosts
from combee_core.settings import CombeeSettings, SettingsError

LOOPBACK = DoorPolicy.for_bind("127.0.0.1", door="combee serve")


def test_a_door_answers_loopback_names_addresses_its_bind_and_listed_names_only():
    for host in ("127.0.0.1:8765", "localhost:8765", "LOCALHOST", "[::1]:8765", "app.localhost:1", "10.0.0.5:80",
                 "[2001:db8::1]:443"):
        assert LOOPBACK.refusal(host, None) is None, host
    status, reason = LOOPBACK.refusal("evil.example:8765", None)  # a rebound name
    assert status == 421 and "evil.example" in reason and "COMBEE_ALLOWED_HOSTS" in reason and "\n" not in reason
    assert LOOPBACK.refusal("localhost.evil.example", None)[0] == 421
    proxied = DoorPolicy.for_bind("0.0.0.0", "review.example.com, Other.Example.")
    assert proxied.refusal("review.example.com", None) is None and proxied.refusal("other.example:9", None) is None
    assert proxied.refusal("0.0.0.0", None) is None  # an address, not a name
    assert DoorPolicy.for_bind("box.internal").refusal("box.internal:8765", None) is None
    assert LOOPBACK.refusal(None, None) is None  # HTTP/1.0, no browser


def test_an_origin_is_answered_only_from_the_door_itself_or_a_listed_name():
    assert LOOPBACK.refusal("127.0.0.1:8765", "http://127.0.0.1:8765") is None
    assert LOOPBACK.refusal("localhost", "http://localhost") is None
    assert LOOPBACK.refusal("localhost:443", "https://localhost", tls=True) is None
    for origin in ("http://evil.example", "http://localhost:3000", "null", "https://127.0.0.1:8765",
                   "file://", "chrome-extension://abc", "http://[bad"):
        refused = LOOPBACK.refusal("127.0.0.1:8765", origin)
        assert refused is not None and refused[0] == 403, origin
    proxied = DoorPolicy.for_bind("127.0.0.1", ["review.example.com"])
    assert proxied.refusal("127.0.0.1:8765", "https://review.example.com") is None  # behind a proxy
    assert proxied.refusal("127.0.0.1:8765", "https://evil.example") is not None


@given(st.from_regex(r"[a-z][a-z0-9-]{0,20}\.(com|net|example|io)", fullmatch=True))
def test_no_foreign_name_passes_a_loopback_door(name):
    assert LOOPBACK.refusal(f"{name}:8765", None)[0] == 421
    assert LOOPBACK.refusal("127.0.0.1:8765", f"http://{name}")[0] == 403


def test_allowed_hosts_are_names_only():
    assert parse_hosts("a.example, b.example:8080,,") == ["a.example", "b.example"]
    with pytest.raises(DoorConfigError, match="COMBEE_ALLOWED_HOSTS"):
        parse_hosts("https://a.example/")
    with pytest.raises(SettingsError, match="ALLOWED_HOSTS"):
        CombeeSettings.load(env={"COMBEE_ALLOWED_HOSTS": "http://x/"})


A_SECRET, B_SECRET, OPS_SECRET = new_secret(), new_secret(), new_secret()
KEYS = (f"# tenant keys\ntenant-a {digest(A_SECRET)} read=tenant-a write=tenant-a\n"
        f"tenant-b {digest(B_SECRET)} read=tenant-b;ops {digest(OPS_SECRET)} read=* write=*")


def test_a_key_reads_and_writes_only_the_playbooks_it_names():
    ring = KeyRing.parse(KEYS, token="global")
    a = ring.grant(f"Bearer {A_SECRET}")
    assert a is not None and a.name == "tenant-a"
    assert a.may_read("tenant-a") and not a.may_read("tenant-b") and not a.may_read("shared")
    assert a.may_write("tenant-a") and not a.may_write("tenant-b")
    assert a.readable(["shared", "tenant-a", "tenant-b"]) == ["tenant-a"]
    b = ring.grant(f"bearer {B_SECRET}")
    assert b is not None and not b.write
    ops = ring.grant(f"Bearer {OPS_SECRET}")
    assert ops is not None and ops.may_read("anything") and ops.writes_everywhere
    token = ring.grant("Bearer global")  # the single COMBEE_SERVE_TOKEN: reads everything, writes nothing
    assert token is not None and token.may_read("tenant-b") and not token.write
    for wrong in (None, "", "Bearer", f"Basic {A_SECRET}", "Bearer nope", f"Bearer {digest(A_SECRET)}"):
        assert ring.grant(wrong) is None, wrong
    assert KeyRing.parse("").grant(None) is OPEN and not KeyRing.parse("").required


def test_key_lines_store_digests_and_bad_lines_are_one_line_errors(tmp_path):
    assert A_SECRET not in KEYS and digest(A_SECRET).startswith("sha256:") and len(digest(A_SECRET)) == 71
    for bad, said in ((f"a {A_SECRET} read=x", "sha256"), (f"a {digest(A_SECRET)} read=", "read="),
                      (f"a {digest(A_SECRET)} own=x", "own=x"), (f"a {digest(A_SECRET)} read=../x", "'../x'"),
                      (f"a {digest(A_SECRET)}", "NAME sha256"),
                      (f"a {digest(A_SECRET)} read=x\na {digest(B_SECRET)} read=y", "repeats")):
        with pytest.raises(AccessKeyError, match="line") as caught:
            KeyRing.parse(bad)
        assert said in str(caught.value) and "\n" not in str(caught.value)
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"tenant-b {digest(B_SECRET)} read=tenant-b\n")
    ring = KeyRing.load(f"tenant-a {digest(A_SECRET)} read=tenant-a", str(keys_file))
    assert {g.name for g in ring.keys.values()} == {"tenant-a", "tenant-b"}
    with pytest.raises(AccessKeyError, match="COMBEE_ACCESS_KEYS_FILE"):
        KeyRing.load("", str(tmp_path / "missing"))
    with pytest.raises(SettingsError, match="ACCESS_KEYS"):
        CombeeSettings.load(env={"COMBEE_ACCESS_KEYS": "a plain-secret read=x"})
    with pytest.raises(SettingsError, match="TLS_KEY"):
        CombeeSettings.load(env={"COMBEE_HTTP_TLS_CERT": "cert.pem"})


def _request(*playbooks: str | None, resource: str | None = None):
    pb = proto_messages()
    request = pb.ExportTraceServiceRequest()
    spans = request.resource_spans.add()
    if resource is not None:
        attribute = spans.resource.attributes.add()
        attribute.key, attribute.value.string_value = PLAYBOOK_ID, resource
    scope = spans.scope_spans.add()
    for number, playbook in enumerate(playbooks, start=1):
        span = scope.spans.add()
        span.trace_id, span.span_id, span.name = b"\x01" * 16, number.to_bytes(8, "big"), "invoke_agent"
        if playbook is not None:
            attribute = span.attributes.add()
            attribute.key, attribute.value.string_value = PLAYBOOK_ID, playbook
    return request


def _targets(request) -> list[str | None]:
    return [span.attribute(PLAYBOOK_ID) for span in iter_spans(request)]


def test_an_ingest_key_writes_only_into_its_playbooks():
    ring = KeyRing.parse(KEYS)
    a = ring.grant(f"Bearer {A_SECRET}")
    assert a is not None
    assert enforce_write_scope(_request("tenant-a", "tenant-a"), a, None) == 0
    unlabelled = _request(None, None)  # a key for one playbook: its spans go there, whatever the default says
    assert enforce_write_scope(unlabelled, a, default_playbook="tenant-b") == 2
    assert _targets(unlabelled) == ["tenant-a", "tenant-a"]
    for request in (_request("tenant-a", "tenant-b"), _request(None, resource="tenant-b"),
                    _request("shared")):
        with pytest.raises(ScopeRefused, match="key tenant-a may not write traces of playbook") as caught:
            enforce_write_scope(request, a, None)
        assert "\n" not in str(caught.value)
    two = KeyRing.parse(f"two {digest(A_SECRET)} write=tenant-a,tenant-c").grant(f"Bearer {A_SECRET}")
    assert two is not None
    with pytest.raises(ScopeRefused, match="names no combee.playbook.id"):
        enforce_write_scope(_request(None), two, None)
    with pytest.raises(ScopeRefused, match="default playbook"):
        enforce_write_scope(_request(None), two, "tenant-b")
    assert enforce_write_scope(_request(None), two, "tenant-c") == 0
    reader = ring.grant(f"Bearer {B_SECRET}")
    assert reader is not None
    with pytest.raises(ScopeRefused, match="may write no playbook"):
        enforce_write_scope(_request("tenant-b"), reader, None)
    everything = _request("tenant-b", None)
    assert enforce_write_scope(everything, OPEN, None) == 0 and _targets(everything) == ["tenant-b", None]


def test_combee_key_new_prints_a_secret_once_and_a_line_holding_its_digest_only(capsys):
    from streams.cli import main

    assert main(["key", "new", "--name", "tenant-a-otel", "--write", "tenant-a"]) == 0
    out, err = capsys.readouterr()
    secret = err.split(": ", 1)[1].strip()
    assert secret.startswith("cmb_") and secret not in out
    ring = KeyRing.parse(out)
    grant = ring.grant(f"Bearer {secret}")
    assert grant is not None and grant.name == "tenant-a-otel" and grant.may_write("tenant-a") and not grant.read
    assert main(["key", "new", "--name", "x"]) == 2
    assert "--read and/or --write" in capsys.readouterr().err
