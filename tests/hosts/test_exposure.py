"""What each host exposes, from outside: no TCP port listens on every interface unless it is one of the
services docs/security.md still lists as not bound to the cluster network. A service that starts
listening everywhere, or one of these bound at last and left here, fails the check; the list shrinks
as issue 25's remaining services are bound. Molecule `cluster` runs it on every host."""

from __future__ import annotations

from tests.hosts import probe

# Port -> the service that still listens on every interface (docs/security.md, "Not secured yet").
NOT_BOUND_YET = {
    6817: "slurmctld",
    6818: "slurmd",
    6819: "slurmdbd",
    8793: "Airflow's task log server (the firewall admits loopback only)",
    8794: "Airflow's triggerer log server (the firewall admits loopback only)",
    19998: "Alluxio master RPC",
    19999: "Alluxio master web",
    19200: "Alluxio master embedded journal",
    29999: "Alluxio worker RPC",
    30000: "Alluxio worker web",
    39999: "Alluxio S3 proxy",
    8082: "the local store's link-shaping proxy (local cluster only)",
}


def test_nothing_else_listens_on_every_interface(host):
    everywhere = {
        port: addresses
        for port, addresses in probe.listening(host).items()
        if addresses & probe.EVERY_INTERFACE
    }
    unexpected = {port: sorted(where) for port, where in everywhere.items() if port not in NOT_BOUND_YET}
    assert not unexpected, f"listening on every interface: {unexpected}"
