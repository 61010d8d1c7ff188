"""Airflow on its host, from outside (issue 25's audit: plain HTTP with the development auth manager):

- the API server listens on the cluster address only, speaks HTTPS with the cluster CA's certificate, and
  plain HTTP gets no answer;
- nothing answers without a token, the default admin/admin gets none, the deploy's admin password does;
- the log servers (every interface, plain HTTP) do not run, PostgreSQL listens on loopback only;
- the secrets, the TLS key and airflow.cfg are private, and the simple auth manager's clear-text password
  file is gone.

Molecule `cluster` runs it on the Airflow host: ``MEGAHOUR_SECRETS_DIR=... pytest --hosts=podman://mh-ctl``.
"""

from __future__ import annotations

from tests.hosts import probe
from tests.hosts.secrets import secret

API, WORKER_LOGS, TRIGGERER_LOGS, POSTGRES = 8080, 8793, 8794, 5432
HOME = "/var/lib/airflow"


def base(host) -> str:
    return f"https://{probe.cluster_address(host)}:{API}"


def test_the_api_server_listens_on_the_cluster_address_only_and_the_log_servers_not_at_all(host):
    bound = probe.listening(host)
    assert bound.get(API) == {probe.cluster_address(host)}, bound.get(API)
    assert WORKER_LOGS not in bound and TRIGGERER_LOGS not in bound
    assert bound.get(POSTGRES) and bound[POSTGRES] <= {"127.0.0.1", "::1"}, bound.get(POSTGRES)


def test_https_with_the_cluster_ca_and_no_plain_http(host):
    assert probe.get(host, f"{base(host)}/api/v2/monitor/health")["status"] == 200
    plain = probe.get(host, f"http://{probe.cluster_address(host)}:{API}/api/v2/monitor/health")
    assert plain["status"] in (0, 400), plain


def test_nothing_answers_without_a_token_and_no_default_password_gets_one(host):
    for path in ("/api/v2/dags", "/api/v2/dags/megahour_ingest/dagRuns", "/auth/fab/v1/users"):
        assert probe.get(host, f"{base(host)}{path}")["status"] == 401, path
        # HTTP basic auth is not a way in (FAB's API takes tokens only), whatever the password.
        assert probe.get(host, f"{base(host)}{path}", "admin", secret("airflow_admin"))["status"] == 401, path
    for password in ("admin", "airflow", ""):
        assert probe.post_json(host, f"{base(host)}/auth/token", {"username": "admin", "password": password})[
            "status"
        ] in (400, 401), password


def test_the_deploys_admin_password_gets_a_token(host):
    body = {"username": "admin", "password": secret("airflow_admin")}
    assert probe.post_json(host, f"{base(host)}/auth/token", body)["status"] == 201


def test_the_secrets_key_and_config_are_private(host):
    expected = {
        f"{HOME}/secrets": ("airflow", "airflow", 0o700),
        f"{HOME}/airflow.cfg": ("root", "airflow", 0o640),
        f"{HOME}/store.env": ("root", "airflow", 0o640),
        f"{HOME}/tls/host.key": ("root", "airflow", 0o640),
    }
    for name in ("sql_alchemy_conn", "jwt_secret", "api_secret_key", "fernet_key"):
        expected[f"{HOME}/secrets/{name}"] = ("airflow", "airflow", 0o600)
    for path, owner in expected.items():
        f = host.file(path)
        assert f.exists, path
        assert (f.user, f.group, f.mode) == owner, path
    assert not host.file(f"{HOME}/secrets/simple_auth_manager_passwords.json").exists
    config = host.file(f"{HOME}/airflow.cfg").content_string
    assert "FabAuthManager" in config and "simple_auth_manager" not in config
    assert secret("airflow_admin") not in config and secret("airflow_db") not in config
