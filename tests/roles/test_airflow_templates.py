"""The airflow role's templates (airflow.cfg, ingest.yml, units), rendered by ansible-playbook here."""

import configparser

import pytest
import yaml

from megahour.ingest.config import IngestConfig
from tests.conftest import REPO

pytestmark = pytest.mark.integration
PLAYBOOK = REPO / "tests" / "roles" / "data" / "render_airflow.yml"

# The keys of /etc/megahour/ingest.yml fixed by the ingest contract (issue 6).
CONTRACT_KEYS = {
    "landing",
    "storage",
    "runs",
    "partition",
    "megahour",
    "max_workers",
    "worker_bandwidth_mb_s",
    "network_mb_s",
    "db_rows_per_s",
    "worker_overhead_s",
    "stagger_jitter_s",
    "retries",
}


@pytest.fixture
def render(run_playbook, tmp_path):
    inventory = {
        "all": {
            "hosts": {
                "ctl": {
                    "ansible_connection": "local",
                    "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))

    def _render(**extra):
        out = tmp_path / "out"
        out.mkdir(exist_ok=True)
        # The cluster network filters (megahour_cluster_address) come with the common role.
        filters = {
            "ANSIBLE_FILTER_PLUGINS": ":".join(
                str(REPO / "roles" / role / "filter_plugins") for role in ("common", "airflow")
            )
        }
        run_playbook(PLAYBOOK, tmp_path / "hosts.yml", {"out": str(out), **extra}, env=filters)
        cfg = configparser.ConfigParser(interpolation=None)
        cfg.read(out / "airflow.cfg")
        return cfg, yaml.safe_load((out / "ingest.yml").read_text()), out

    return _render


def test_ingest_yml_has_the_contract_keys(render):
    _, ingest, _ = render()
    assert set(ingest) == CONTRACT_KEYS
    # Every rendered key is one megahour.ingest.config reads (an unknown key would be refused there).
    assert IngestConfig.from_dict(ingest).worker_overhead_s == ingest["worker_overhead_s"]
    assert ingest["landing"] == "/srv/megahour/landing"
    assert ingest["storage"] == "/srv/megahour/storage"
    assert ingest["runs"] == "/srv/megahour/ingest/runs"
    assert ingest["partition"] == "ingest"
    assert ingest["megahour"] == "/usr/local/bin/megahour"


def test_ingest_yml_user_keys_win_and_null_drops(render):
    _, ingest, _ = render(
        airflow_ingest_config={"max_workers": 6, "retries": None}, megahour_shared_root="/shared"
    )
    assert ingest["max_workers"] == 6
    assert "retries" not in ingest
    assert ingest["landing"] == "/shared/landing"


def test_airflow_cfg_local_executor_fab_https_and_no_secrets(render):
    cfg, _, out = render()
    assert cfg["core"]["executor"] == "LocalExecutor"
    # A production auth manager, not the simple one (development only, passwords in clear).
    assert cfg["core"]["auth_manager"] == "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
    assert not [key for key in cfg["core"] if key.startswith("simple_auth_manager")]
    # HTTPS everywhere the API is named, with the cluster CA as the task runners' only trust.
    assert cfg["core"]["execution_api_server_url"] == "https://10.88.0.5:8080/execution/"
    assert cfg["api"]["base_url"] == "https://10.88.0.5:8080"
    assert cfg["api"]["host"] == "10.88.0.5"
    assert cfg["api"]["ssl_cert"] == "/var/lib/airflow/tls/host.crt"
    assert cfg["api"]["ssl_key"] == "/var/lib/airflow/tls/host.key"
    assert cfg["api"]["ssl_ca_file"] == "/usr/local/share/ca-certificates/megahour-cluster-ca.crt"
    assert cfg["api"]["client_use_public_certs"] == "False"
    assert cfg["fab"]["cookie_secure"] == "True"
    # Secrets are read from files by the *_cmd options, never written into airflow.cfg.
    for section, key in [
        ("database", "sql_alchemy_conn"),
        ("core", "fernet_key"),
        ("api", "secret_key"),
        ("api_auth", "jwt_secret"),
    ]:
        assert key not in cfg[section]
        assert cfg[section][f"{key}_cmd"].startswith("cat /var/lib/airflow/secrets/")
    unit = (out / "airflow-scheduler.service").read_text()
    assert "User=airflow" in unit
    assert "After=network-online.target postgresql.service airflow-api-server.service" in unit
    assert "EnvironmentFile=-/var/lib/airflow/store.env" in unit
    # The log servers listen on every interface in plain HTTP: off unless asked for.
    assert "ExecStart=/opt/airflow/venv/bin/airflow scheduler --skip-serve-logs\n" in unit
    assert (
        "ExecStart=/opt/airflow/venv/bin/airflow api-server\n"
        in (out / "airflow-api-server.service").read_text()
    )


def test_two_schedulers_and_two_triggerers_by_default(render):
    _, _, out = render()
    units = sorted(path.name for path in out.glob("airflow-*.service"))
    assert units == [
        "airflow-api-server.service",
        "airflow-dag-processor.service",
        "airflow-scheduler-2.service",
        "airflow-scheduler.service",
        "airflow-triggerer-2.service",
        "airflow-triggerer.service",
    ]
    second = (out / "airflow-scheduler-2.service").read_text()
    assert "Description=Apache Airflow scheduler (airflow-scheduler-2) (megahour ingestion)\n" in second
    assert "ExecStart=/opt/airflow/venv/bin/airflow scheduler --skip-serve-logs\n" in second
    assert (
        "ExecStart=/opt/airflow/venv/bin/airflow triggerer --skip-serve-logs\n"
        in (out / "airflow-triggerer-2.service").read_text()
    )
    # A dead scheduler's running tasks are retried by the other after the heartbeat timeout: 2 min.
    cfg, _, _ = render()
    assert cfg["scheduler"]["task_instance_heartbeat_timeout"] == "120"
    assert cfg["scheduler"]["orphaned_tasks_check_interval"] == "60"


def test_log_servers_on_when_asked(render):
    _, _, out = render(airflow_serve_logs=True)
    assert (
        "ExecStart=/opt/airflow/venv/bin/airflow scheduler\n"
        in (out / "airflow-scheduler.service").read_text()
    )


def test_the_object_store_environment_is_kept_out_of_airflow_cfg(render):
    import shlex

    secret = 'we"ird\\key $HOME'
    store = {"AWS_SECRET_ACCESS_KEY": secret, "AWS_ACCESS_KEY_ID": "lab", "AWS_ENDPOINT_URL": "http://s:8082"}
    _, _, out = render(airflow_store_environment=store)
    lines = [
        line for line in (out / "store.env").read_text().splitlines() if line and not line.startswith("#")
    ]
    assert [line.partition("=")[0] for line in lines] == sorted(store)
    # double-quoted with \\ and \" escaped: systemd's EnvironmentFile (like a POSIX shell, for these two
    # escapes) gives back each value as written
    assert {line.partition("=")[0]: shlex.split(line.partition("=")[2]) for line in lines} == {
        k: [v] for k, v in store.items()
    }
    assert "ird" not in (out / "airflow.cfg").read_text()


def test_airflow_cfg_user_sections_merge_and_null_drops(render):
    cfg, _, _ = render(airflow_config={"core": {"parallelism": 32, "load_examples": None}, "smtp": {"x": 1}})
    assert cfg["core"]["parallelism"] == "32"
    assert "load_examples" not in cfg["core"]
    assert cfg["core"]["executor"] == "LocalExecutor"
    assert cfg["smtp"]["x"] == "1"
