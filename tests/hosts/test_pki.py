"""Every host's certificate and key, from outside: the key private to root and ssl-cert, the certificate
issued by the cluster CA on the control node, valid for the host's inventory name and cluster address,
and that CA in the host's trust store. Molecule `cluster` runs it on every host after its converge."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from tests.hosts import probe

# Prints the certificate's issuer, its DNS and IP names, one per line (python3-cryptography: pki installs it).
_NAMES = r"""
import sys
from cryptography import x509
cert = x509.load_pem_x509_certificate(open(sys.argv[1], "rb").read())
print(cert.issuer.rfc4514_string())
names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
for name in names.get_values_for_type(x509.DNSName):
    print(name)
for address in names.get_values_for_type(x509.IPAddress):
    print(address)
"""


def control_node_ca() -> str:
    folder = os.environ.get("MEGAHOUR_SECRETS_DIR", "")
    assert folder, "set MEGAHOUR_SECRETS_DIR to the inventory's secrets directory (molecule's verify does)"
    return (Path(folder) / "pki" / "ca.crt").read_text()


def test_the_host_key_is_private_to_root_and_ssl_cert(host):
    key = host.file("/etc/ssl/private/megahour-host.key")
    assert (key.user, key.group, key.mode) == ("root", "ssl-cert", 0o640)


def test_the_certificate_is_the_cluster_cas_for_the_hosts_name_and_address(host):
    command = shlex.join(["python3", "-c", _NAMES, "/etc/ssl/certs/megahour-host.crt"])
    lines = host.check_output(command).splitlines()
    issuer, names = lines[0], set(lines[1:])
    assert issuer == "CN=megahour cluster CA"
    assert {host.backend.get_hostname(), probe.cluster_address(host), "127.0.0.1"} <= names, names


def test_the_host_trusts_the_control_nodes_ca(host):
    installed = host.file(probe.CLUSTER_CA)
    assert (installed.user, installed.mode) == ("root", 0o644)
    assert installed.content_string == control_node_ca()
    # update-ca-certificates linked it into the system bundle every TLS client reads.
    bundle = host.file("/etc/ssl/certs/ca-certificates.crt").content_string
    assert control_node_ca().strip().splitlines()[1] in bundle
