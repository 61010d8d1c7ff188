"""The warehouse host (clickhouse-server), from outside: it listens only on the cluster address and
loopback, refuses every login without the right password (the package's `default` account included,
even on loopback), and keeps each password-holding file private. Molecule `warehouse` runs it after
converge: ``pytest --hosts=podman://wh-ctl tests/hosts/test_warehouse_server.py``."""

from __future__ import annotations

import shlex

from tests.hosts import probe

CLICKHOUSE_PORTS = (8123, 9000, 9009)
# Logs in over HTTP as USER with PASSWORD and prints the status code (python3 is on every node; curl is
# not part of the node image).
LOGIN = (
    "import base64, sys, urllib.request, urllib.error\n"
    "user, password = sys.argv[1], sys.argv[2]\n"
    "token = base64.b64encode(f'{user}:{password}'.encode()).decode()\n"
    "request = urllib.request.Request('http://127.0.0.1:8123/', data=b'SELECT 1',\n"
    "                                 headers={'Authorization': 'Basic ' + token})\n"
    "try:\n"
    "    print(urllib.request.urlopen(request, timeout=10).status)\n"
    "except urllib.error.HTTPError as exc:\n"
    "    print(exc.code)\n"
)


def login_status(host, user: str, password: str) -> int:
    command = shlex.join(["python3", "-c", LOGIN, user, password])
    return int(host.check_output(command).strip())


def test_clickhouse_listens_on_the_cluster_address_and_loopback_only(host):
    address = probe.cluster_address(host)
    bound = {port: where for port, where in probe.listening(host).items() if port in CLICKHOUSE_PORTS}
    assert bound.get(8123) == {address, "127.0.0.1"}, bound
    assert bound.get(9000) == {address, "127.0.0.1"}, bound
    for port, addresses in bound.items():
        assert not addresses & probe.EVERY_INTERFACE, f"port {port} listens on every interface: {addresses}"


def test_no_login_works_without_its_password(host):
    # The server answers (root's query works, below); what matters is that none of these is let in.
    for user, password in (("default", ""), ("default", "default"), ("megahour", ""), ("readonly", "")):
        assert login_status(host, user, password) != 200, f"{user} with password {password!r} was let in"


def test_root_queries_with_the_default_password_from_its_private_config(host):
    assert host.check_output('clickhouse-client --query "SELECT 1"').strip() == "1"
    config = host.file("/root/.clickhouse-client/config.xml")
    assert (config.user, config.mode) == ("root", 0o600)


def test_every_file_with_a_password_or_its_hash_is_private(host):
    for path in (
        "/etc/clickhouse-server/users.d/megahour.xml",
        "/etc/clickhouse-server/config.d/megahour.xml",
    ):
        f = host.file(path)
        assert f.exists and (f.user, f.group) == ("root", "clickhouse"), path
        assert f.mode & 0o007 == 0, f"{path} is mode {oct(f.mode)}"
