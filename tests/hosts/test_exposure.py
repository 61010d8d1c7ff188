"""What each host exposes, from outside: no TCP port listens on every interface unless it is one of the
services docs/security.md lists as not bound to the cluster network (the local store's shaping proxy, a
stand-in for a remote bucket). A service that starts listening everywhere fails the check. Molecule
`cluster` runs it on every host and the store."""

from __future__ import annotations

from tests.hosts import probe

# Port -> the service that still listens on every interface (docs/security.md, "Not secured yet").
NOT_BOUND_YET = {
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
