"""The monitoring role's prometheus.yml, rendered by ansible-playbook on this machine: dcgm-exporter is
scraped on the GPU nodes that run it, and the job is left out where none does."""

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration
PLAYBOOK = REPO / "tests" / "roles" / "data" / "render_prometheus_yml.yml"


@pytest.fixture
def render(run_playbook, tmp_path):
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    inventory = {
        "all": {
            "children": {
                "cluster": {
                    "children": {
                        "controller": {"hosts": {"ctl": dict(local)}},
                        "compute": {"hosts": {f"gpu-{i}": dict(local) for i in (1, 2, 3)}},
                    }
                }
            }
        }
    }
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))

    def _render(dcgm_hosts):
        out = tmp_path / "prometheus.yml"
        run_playbook(PLAYBOOK, tmp_path / "hosts.yml", {"out": str(out), "dcgm_hosts": dcgm_hosts})
        return {job["job_name"]: job for job in yaml.safe_load(out.read_text())["scrape_configs"]}

    return _render


def test_dcgm_is_scraped_where_it_runs(render):
    jobs = render(["gpu-1", "gpu-3"])
    assert jobs["dcgm"]["static_configs"][0]["targets"] == ["gpu-1:9400", "gpu-3:9400"]
    assert jobs["dcgm"]["scheme"] == "https"
    assert sorted(jobs["node"]["static_configs"][0]["targets"]) == [
        "ctl:9100",
        "gpu-1:9100",
        "gpu-2:9100",
        "gpu-3:9100",
    ]


def test_no_dcgm_job_where_none_runs(render):
    assert "dcgm" not in render([])
