"""Slurm's daemons from outside: each listens on the host's cluster address only (CommunicationParameters
NoInAddrAny, NoCtldInAddrAny; the audit found them on every interface), its secrets are private, and a
request without a valid munge credential gets nothing. Molecule `cluster` runs it on every cluster host."""

from __future__ import annotations

import shlex

from tests.hosts import probe

SLURMCTLD, SLURMD, SLURMDBD = 6817, 6818, 6819


def test_each_daemon_listens_on_the_cluster_address_only(host):
    bound = probe.listening(host)
    address = probe.cluster_address(host)
    daemons = {"slurmctld": SLURMCTLD, "slurmdbd": SLURMDBD, "slurmd": SLURMD}
    running = {name: port for name, port in daemons.items() if host.service(name).is_running}
    assert running, "no Slurm daemon runs here"
    for name, port in running.items():
        assert bound.get(port) == {address}, (name, bound.get(port))


def test_the_secrets_are_private(host):
    key = host.file("/etc/munge/munge.key")
    assert (key.user, key.mode) == ("munge", 0o400)
    if host.file("/etc/slurm/slurmdbd.conf").exists:
        conf = host.file("/etc/slurm/slurmdbd.conf")
        assert (conf.user, conf.mode) == ("slurm", 0o600)
        assert "NoInAddrAny" in conf.content_string


# A client whose munged holds another key: its credentials do not decode with the cluster's, so slurmctld
# refuses the request (only a process that can reach the host's own munged speaks Slurm).
_FOREIGN_KEY = r"""
set -eu
d=$(mktemp -d /run/munge-foreign.XXXXXX)
trap '[ -f "$d/pid" ] && kill "$(cat "$d/pid")" 2>/dev/null; rm -rf "$d"' EXIT
chown munge:munge "$d" && chmod 0700 "$d"
if [ "$1" = cluster ]; then cp /etc/munge/munge.key "$d/key"; else head -c 1024 /dev/urandom > "$d/key"; fi
chown munge:munge "$d/key" && chmod 0400 "$d/key"
runuser -u munge -- munged --force --socket="$d/sock" --key-file="$d/key" --pid-file="$d/pid" \
  --seed-file="$d/seed" --log-file="$d/log"
if grep -q '^AuthInfo=' /etc/slurm/slurm.conf; then
  sed "s|^AuthInfo=\(.*\)|AuthInfo=\1,socket=$d/sock|" /etc/slurm/slurm.conf > "$d/slurm.conf"
else
  { cat /etc/slurm/slurm.conf; echo "AuthInfo=socket=$d/sock"; } > "$d/slurm.conf"
fi
set +e
SLURM_CONF="$d/slurm.conf" timeout 60 sinfo --noheader --format %t
echo "rc=$?"
"""


def sinfo_through_another_munged(host, key: str) -> str:
    """The last line, rc=N, of sinfo through a munged of its own holding a copy of the cluster's key
    (``cluster``) or another one (``foreign``)."""
    result = host.run(f"bash -c {shlex.quote(_FOREIGN_KEY)} probe {key}")
    lines = result.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("rc="), result.stdout + result.stderr  # munged started
    return lines[-1]


def test_a_request_signed_with_another_munge_key_is_refused(host):
    # The same setup with the cluster's key works, so the refusal is the key's and nothing else's.
    assert sinfo_through_another_munged(host, "cluster") == "rc=0"
    assert sinfo_through_another_munged(host, "foreign") != "rc=0"
