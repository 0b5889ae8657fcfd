"""A hand-written corpus for redaction (docs/redaction.md, "Proof"): realistic secrets and personal data as they
appear in agents' traces, each with the values that must not survive, and ordinary lessons that should pass
unchanged (the false-positive count). Used by tests/unit/test_redaction_corpus.py, the broker test and
bench/redaction_detectors.py. All values are made up."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    kind: str
    text: str
    """A line of a trace with the values in it."""
    values: tuple[str, ...]
    """What must not appear once redacted."""


def _c(kind: str, text: str, *values: str) -> Case:
    return Case(kind, text, values)


PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
       "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n-----END RSA PRIVATE KEY-----")
OPENSSH = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
           "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
           "QyNTUxOQAAACDx1Kq7Qf2hM3nTzP0aLbJcXkVxQ2Y9s8Rr1Z4oM5eUNwAAAJjD8b0Tw/G9\n-----END OPENSSH PRIVATE KEY-----")
EC_TRUNCATED = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBkg4LVWM9nuwNSk3yByxZpYRTBnVJk5oSpc6TmLd8mWoAoGCCqGSM49"

SECRETS: tuple[Case, ...] = (
    # labels joined with _ - . and nothing, env files, shell
    _c("label_", "export DB_PASSWORD=Hunter2-Swordfish!", "Hunter2-Swordfish!"),
    _c("label_", "MY_API_KEY=9f8e7d6c5b4a39281706f5e4", "9f8e7d6c5b4a39281706f5e4"),
    _c("label_", "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
       "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    _c("label_", "set STRIPE_SECRET_KEY=whsec_5f1aB2c3D4e5F6g7H8 before the deploy", "whsec_5f1aB2c3D4e5F6g7H8"),
    _c("label_", "GITHUB_TOKEN=abcdef0123456789abcdef0123456789abcdef01 ./release.sh",
       "abcdef0123456789abcdef0123456789abcdef01"),
    _c("label_", "PGPASSWORD=pg-Secr3t-99 psql -h db.internal -U app", "pg-Secr3t-99"),
    _c("label_", "the tool ran with SLACK_WEBHOOK_SECRET = 'T0k3n#with spaces' set", "T0k3n#with spaces"),
    _c("label-", "x-api-key: 5b9c1e2d-7f3a-4c8e-9d0b-2a6f4e8c1d3b", "5b9c1e2d-7f3a-4c8e-9d0b-2a6f4e8c1d3b"),
    _c("label-", "--db-password=Corr3ct-Horse-Battery", "Corr3ct-Horse-Battery"),
    _c("label-", "mysql --password s3cr3tMySQL! -u root", "s3cr3tMySQL!"),
    _c("label-", "client-secret: gOcSpX-7hT2kLm9Qw4Rz", "gOcSpX-7hT2kLm9Qw4Rz"),
    _c("label.", "spring.datasource.password=Sup3rS3cret", "Sup3rS3cret"),
    _c("label.", "db.password = 'ora_pw_4821'", "ora_pw_4821"),
    _c("label.", "smtp.auth.token: 1f2e3d4c5b6a7988", "1f2e3d4c5b6a7988"),
    _c("camel", "clientSecret=Zm9vYmFyYmF6cXV4MTIz", "Zm9vYmFyYmF6cXV4MTIz"),
    _c("camel", "const refreshToken = \"rt.9XkQ2mP7vL4nB8cD\";", "rt.9XkQ2mP7vL4nB8cD"),
    # JSON and YAML
    _c("json", '{"db_password": "Hunter2-Swordfish!", "user": "app"}', "Hunter2-Swordfish!"),
    _c("json", '{"apiKey":"AbC123xYz789QwE456"}', "AbC123xYz789QwE456"),
    _c("json", '{"auth": {"access_token": "at-88c1f0a9e4b2d7c6", "expires_in": 3600}}', "at-88c1f0a9e4b2d7c6"),
    _c("json", '{"password": "correct horse battery staple"}', "correct horse battery staple"),
    _c("json", 'tool output: {\\"secret\\": \\"q8W#e7R$t6Y\\"}', "q8W#e7R$t6Y"),
    _c("yaml", "database:\n  host: db\n  password: yaml-Pa55word", "yaml-Pa55word"),
    _c("yaml", "credentials:\n  api_key: \"k-7781-ab-zz-0042\"", "k-7781-ab-zz-0042"),
    _c("yaml", "  secret_key: 'django-insecure-8v#x!q2@l0z'", "django-insecure-8v#x!q2@l0z"),
    # headers
    _c("header", "Authorization: Basic YWxpY2U6czNjcjN0UGFzcw==", "YWxpY2U6czNjcjN0UGFzcw=="),
    _c("header", "Authorization: Bearer tok3nValue0123456789abcd", "tok3nValue0123456789abcd"),
    _c("header", "Proxy-Authorization: Digest dXNlcjpwYXNzd29yZA", "dXNlcjpwYXNzd29yZA"),
    _c("header", "curl -H 'Authorization: Token 0123abcd4567efgh' https://api.example.com",
       "0123abcd4567efgh"),
    _c("header", "Cookie: sessionid=8f3a2b1c9d0e7f6a; csrftoken=Zx9Yw8Vu7T", "8f3a2b1c9d0e7f6a", "Zx9Yw8Vu7T"),
    _c("header", "X-Auth-Token: 44d1c8e0b7a6", "44d1c8e0b7a6"),
    # URLs with credentials, query strings, connection strings
    _c("url", "cloning https://deploy:ghs-P4ssw0rd@git.example.com/repo.git", "ghs-P4ssw0rd"),
    _c("url", "postgres://app:pg%40Secret1@db.internal:5432/orders", "pg%40Secret1"),
    _c("url", "redis://:r3dis-pass@cache:6379/0", "r3dis-pass"),
    _c("url", "mongodb+srv://admin:M0ngoPass!@cluster0.example.net/test", "M0ngoPass!"),
    _c("url", "GET /v1/export?user=7&access_token=aq.Z8x7c6v5b4n3&fmt=csv", "aq.Z8x7c6v5b4n3"),
    _c("url", "https://bucket.s3.amazonaws.com/f?X-Amz-Signature=9d2c7a1be4f3a6b5c8d7e0f1a2b3c4d5",
       "9d2c7a1be4f3a6b5c8d7e0f1a2b3c4d5"),
    _c("conn", "Server=tcp:sql.example.com;Database=app;User Id=sa;Password=Pa55w0rd!;Encrypt=true", "Pa55w0rd!"),
    _c("conn", "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey="
               "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;",
       "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="),
    _c("conn", "jdbc:mysql://db:3306/shop?user=shop&password=Jdbc-Pw-77", "Jdbc-Pw-77"),
    _c("conn", "amqp://guest:rabbit-Pw9@mq.internal:5672/", "rabbit-Pw9"),
    # private keys
    _c("key", f"here is the deploy key:\n{PEM}\nuse it once", PEM.splitlines()[1], PEM.splitlines()[2]),
    _c("key", OPENSSH, OPENSSH.splitlines()[1], OPENSSH.splitlines()[2]),
    _c("key", f"key (cut): {EC_TRUNCATED}", EC_TRUNCATED.splitlines()[1]),
    # known token shapes
    _c("shape", "used key sk-proj-Zx81kLmN02pQrStUvWx3yZ for the call", "sk-proj-Zx81kLmN02pQrStUvWx3yZ"),
    _c("shape", "ghp_0123456789abcdefghijABCDEFGHIJklmnop leaked in the log",
       "ghp_0123456789abcdefghijABCDEFGHIJklmnop"),
    _c("shape", "AKIAIOSFODNN7EXAMPL3 is the access key id", "AKIAIOSFODNN7EXAMPL3"),
    _c("shape", "slack xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp", "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp"),
    _c("shape", "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXZhbHVl",
       "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlLXZhbHVl"),
    _c("shape", "npm token npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8", "npm_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"),
    _c("shape", "stripe sk_live_51HqLyjWDarjtT1zdp7dc", "sk_live_51HqLyjWDarjtT1zdp7dc"),
    _c("shape", "gitlab glpat-xX1yY2zZ3aA4bB5cC6dD", "glpat-xX1yY2zZ3aA4bB5cC6dD"),
    # vendors' token shapes without a label (the maintained detector's own list)
    _c("vendor", "discord bot MTA4NzY1NDMyMTAxMjM0NTY3OA.GhT3xY.a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P",
       "MTA4NzY1NDMyMTAxMjM0NTY3OA.GhT3xY.a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P"),
    _c("vendor", "telegram 1234567890:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawQ done",
       "1234567890:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsawQ"),
    _c("vendor", "mailchimp 0123456789abcdef0123456789abcdef-us12", "0123456789abcdef0123456789abcdef-us12"),
    _c("vendor", "square sq0csp-0123456789ABCDEFGHIJabcdefghij0123456789-_xyz",
       "sq0csp-0123456789ABCDEFGHIJabcdefghij0123456789-_xyz"),
    _c("vendor", "sendgrid 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",
       "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"),
    _c("vendor", "artifactory AKCp8jQ8tAahqpT5JjZpHmXdQ7rC3Jv2sLkB", "AKCp8jQ8tAahqpT5JjZpHmXdQ7rC3Jv2sLkB"),
    _c("vendor", 'tool returned {"id": 7, "x": "q9Lm2Vb8Ns4Kd7Rt1Yw6Hc3Jf5Gp0Zx"}', "q9Lm2Vb8Ns4Kd7Rt1Yw6Hc3Jf5Gp0Zx"),
    # said in prose
    _c("prose", "my password is Hunter2!! please reset it", "Hunter2!!"),
    _c("prose", "Mi contraseña: Gato-Negro-42", "Gato-Negro-42"),
    _c("prose", "Mein Passwort ist: Sonne2024#", "Sonne2024#"),
    # e-mails, ASCII and not
    _c("email", "Customer alice.smith+billing@example.com asked for a refund", "alice.smith+billing@example.com"),
    _c("email", "escribir a josé@correo.es mañana", "josé@correo.es"),
    _c("email", "contact: jürgen.müller@münchen.de", "jürgen.müller@münchen.de"),
    _c("email", "письмо на иван@пример.рф отправлено", "иван@пример.рф"),
    _c("email", "cc 山田太郎@例え.jp please", "山田太郎@例え.jp"),
    _c("email", "mailto:o'brien@corp.example.ie?subject=refund", "o'brien@corp.example.ie"),
    _c("email", "<li>françois.dupont@exemple.fr</li>", "françois.dupont@exemple.fr"),
    # cards, with every separator people type
    _c("card", "paid with card 4111 1111 1111 1111.", "4111 1111 1111 1111"),
    _c("card", "card 4111  1111  1111  1111 (double spaces)", "4111  1111  1111  1111"),
    _c("card", "card 4111\u00a01111\u00a01111\u00a01111 (no-break spaces)", "4111\u00a01111\u00a01111\u00a01111"),
    _c("card", "card 5500/0000/0000/0004 expires 12/29", "5500/0000/0000/0004"),
    _c("card", "Amex 3782-822463-10005", "3782-822463-10005"),
    _c("card", "card 4111\u202f1111\u202f1111\u202f1111 narrow spaces", "4111\u202f1111\u202f1111\u202f1111"),
    _c("card", "card 4111.1111.1111.1111", "4111.1111.1111.1111"),
    _c("card", "card number: 6011000990139424", "6011000990139424"),
    # phones
    _c("phone", "call +1 415-555-0134 after five", "+1 415-555-0134"),
    _c("phone", "office (212) 555-0199", "(212) 555-0199"),
    _c("phone", "Tel. +44\u00a020\u00a07946\u00a00958", "+44\u00a020\u00a07946\u00a00958"),
)
"""Every value must be gone once redacted (0 leaks)."""

ORDINARY_LESSONS: tuple[str, ...] = (
    "When the customer asks for a refund, check the order date before answering.",
    "Never paste an API key into the chat; read it from the vault instead.",
    "Set max_tokens=512 for summaries and 2048 for reports.",
    "The token budget is 8000 tokens per call: trim the context first.",
    "Rotate the password every 90 days and store it in the secret manager.",
    "If the password reset fails, ask for the e-mail address on file.",
    "Use the tokenizer of the model to count tokens, not len(text) / 4.",
    "For unit conversions (R03), convert to SI units before comparing values.",
    "For dates, write them as ISO 8601 (2026-11-25) and keep the time zone.",
    "Round money amounts to 2 decimals only at the end; store Decimal.",
    "Version 1.2.3 of the client fixes the retry bug; upgrade before 2026-12-01.",
    "Look the customer up by order id (ORD-48213), never by name.",
    "The passenger count must be between 1 and 9.",
    "Cache the tool's answer for 300 s; the lookup is slow.",
    "Escalate to a human when the user mentions a chargeback.",
    "Ask for the last four digits of the card, never the whole number.",
    "Check the status page at https://status.example.com before retrying.",
    "Secrets belong in environment variables, never in the prompt.",
    "Use the sort key created_at when listing invoices.",
    "Authorization is required for the export tool; ask the user to sign in.",
    "Bearer tokens expire after an hour; refresh them before long jobs.",
    "The session id changes on every login, so do not cache it.",
    "Retry at most 3 times with a 2 s backoff, then report the error.",
    "Trace r-3f2a9c0d1e2f3a4b showed the tool timing out after 30 s.",
    "Digest sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 identifies the build.",
    "Measure latency at p50, p95 and p99; report milliseconds.",
    "Phone numbers must be stored in E.164 format.",
    "Use 127.0.0.1:8080 for the local proxy, not 0.0.0.0.",
    "When a user shares a password, tell them to change it and do not repeat it.",
    "Prefer the key: value form in YAML configs for readability.",
    "In the tools section, call search before lookup.",
    "The invoice total 1234567.89 must match the ledger.",
    "Timestamps like 1732545600000 are milliseconds since the epoch.",
    "Use @decorator syntax for the retry wrapper.",
    "Split the CSV on commas, then trim spaces.",
    "A pin of the dependency version avoids surprise upgrades.",
    "Secret santa rules do not apply to refunds.",
    "For arithmetic, compute step by step and check the units at the end.",
    "Ask for the account number only when the user starts a transfer.",
    "The credentials page explains how to create a key.",
)
"""Lessons a playbook holds: none of them holds personal data or a secret (each one changed is a false positive)."""
