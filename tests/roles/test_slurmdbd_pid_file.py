"""slurm_controller puts slurmdbd's pid file where the installed unit lets the daemon write it: Debian 12's
22.05 runs it as root (/run), Debian 13's 24.11 as slurm with RuntimeDirectory=slurmdbd. Real units."""

import pytest
import yaml

from tests.conftest import REPO

pytestmark = pytest.mark.integration
UNITS = REPO / "tests" / "roles" / "data" / "units"


@pytest.mark.parametrize(
    "unit,pid_file",
    [
        ("slurmdbd-22.05.8-4+deb12u3.service", "/run/slurmdbd.pid"),
        ("slurmdbd-24.11.5-4+deb13u1.service", "/run/slurmdbd/slurmdbd.pid"),
        ("", "/run/slurmdbd.pid"),  # --check on a host without the package yet
    ],
)
def test_the_pid_file_follows_the_unit(run_playbook, tmp_path, unit, pid_file):
    out = tmp_path / "pid_file"
    local = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {"localhost": local}}}))
    extra = {"unit_path": str(UNITS / unit) if unit else "", "out": str(out)}
    run_playbook(REPO / "tests/roles/data/slurmdbd_pid_file.yml", tmp_path / "hosts.yml", extra)
    assert out.read_text() == pid_file
