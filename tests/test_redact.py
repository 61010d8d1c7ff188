"""megahour.redact: credentials out of kept text, on the shapes real tools print."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.redact import REDACTED, redact_argv, redact_env, redact_text

# (text as a tool prints it, what must remain)
CASES = [
    # libpq / SQLAlchemy connection URL (Airflow's sql_alchemy_conn shape)
    (
        "postgresql+psycopg2://airflow:Zx9-pw@db.lab:5432/airflow",
        f"postgresql+psycopg2://airflow:{REDACTED}@db.lab:5432/airflow",
    ),
    ("redis://:onlypass@cache:6379/0", f"redis://:{REDACTED}@cache:6379/0"),
    # an S3 pre-signed URL (AWS SigV4 query parameters)
    (
        "GET https://bkt.s3.amazonaws.com/ep.mcap?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE"
        "%2F20261204%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature=0a1b2c3d4e",
        f"GET https://bkt.s3.amazonaws.com/ep.mcap?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={REDACTED}"
        f"&X-Amz-Signature={REDACTED}",
    ),
    (
        "export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        f"export AWS_SECRET_ACCESS_KEY={REDACTED}",
    ),
    ('{"api_key": "abcd1234efgh", "lr": 0.001}', f'{{"api_key": "{REDACTED}", "lr": 0.001}}'),
    (
        "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl'",
        f"curl -H 'Authorization: Bearer {REDACTED}'",
    ),
    ("token hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789 loaded", f"token {REDACTED} loaded"),
    (
        "git clone https://x:ghp_0123456789abcdefghijABCDEFGHIJ012345@github.example/x",
        f"git clone https://x:{REDACTED}@github.example/x",
    ),
    (
        "webhook https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        f"webhook https://hooks.slack.com/services/{REDACTED}",
    ),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        f"-----BEGIN RSA PRIVATE KEY-----{REDACTED}-----END RSA PRIVATE KEY-----",
    ),
]

# Found in review: shapes the first version let through.
CASES += [
    ('"auth_token": "Bearer abcdefghijklmnop"', f'"auth_token": "{REDACTED}"'),
    ('password = "two words"', f'password = "{REDACTED}"'),
    ("--password=12345678", f"--password={REDACTED}"),
    (
        "launch: torchrun train.py --password hunter2 --lr 1e-4",
        f"launch: torchrun train.py --password {REDACTED} --lr 1e-4",
    ),
    ("stripe sk_live_abcdefghijklmnop1234", f"stripe {REDACTED}"),
    ("Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b", f"Authorization: Token {REDACTED}"),
]

# Text that must come through unchanged: training logs, paths, URLs without credentials.
KEPT = [
    "step 120 loss 2.3141 tokens/s 181234 mfu 41.2%",
    "max_tokens=4096 tokens: 2048",
    "https://mlflow.lab:5000/api/2.0/runs/get?run_id=ab12",
    "s3://megahour/verify-ingest/storage/ep-00003.mcap",
    "commit 2b7e7c4f9a1d3e5f60718293a4b5c6d7e8f90123",
    "srun: job 42 queued and waiting for resources",
    "Resizing token embeddings to 32000",
    "tokenizer: gpt2 num_tokens=1.2e6 sort_key=duration password_file=/etc/megahour/warehouse.password",
    "using basic augmentation; Bearer of bad news",
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_known_shapes_are_redacted(text, expected):
    assert redact_text(text) == expected


@pytest.mark.parametrize("text", KEPT)
def test_ordinary_text_is_kept(text):
    assert redact_text(text) == text


PASSWORD = st.text(string.ascii_letters + string.digits + "-._~!$&'()*+,;=%", min_size=1, max_size=40)


@given(user=st.text(string.ascii_letters + string.digits, max_size=12), password=PASSWORD)
def test_a_url_password_never_survives(user, password):
    url = f"https://{user}:{password}@host.lab:8443/path"
    out = redact_text(url)
    assert out == f"https://{user}:{REDACTED}@host.lab:8443/path"


@given(st.text(max_size=200))
def test_redaction_is_idempotent(text):
    once = redact_text(text)
    assert redact_text(once) == once


def test_env_names_and_values():
    env = {
        "HF_TOKEN": "x",
        "WANDB_API_KEY": "k",
        "DB_Password": "p",
        "DATABASE_URL": "mysql://slurm:pw1@db/slurm_acct_db",
        "PATH": "/usr/bin",
    }
    assert redact_env(env) == {
        "DATABASE_URL": f"mysql://slurm:{REDACTED}@db/slurm_acct_db",
        "DB_Password": REDACTED,
        "HF_TOKEN": REDACTED,
        "PATH": "/usr/bin",
        "WANDB_API_KEY": REDACTED,
    }


def test_argv_hides_the_value_after_a_secret_flag():
    argv = [
        "megahour",
        "x",
        "--db-password",
        "pw",
        "--api-key=k2",
        "--lr",
        "3e-4",
        "--wandb-key=w1",
        "--token",
    ]
    assert redact_argv(argv) == [
        "megahour",
        "x",
        "--db-password",
        REDACTED,
        f"--api-key={REDACTED}",
        "--lr",
        "3e-4",
        f"--wandb-key={REDACTED}",
        "--token",
    ]
