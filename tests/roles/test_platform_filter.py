"""The common role's megahour_platform filter: the names that differ between OS images, read from the one
OS table (megahour.inventory.platforms), for the host whose facts these are."""

import pytest
from ansible.errors import AnsibleFilterError

from megahour.inventory.platforms import PLATFORMS
from tests.conftest import REPO, filter_plugins

# What Ansible's setup module reports on these images (distribution facts as gathered on the local
# cluster's bookworm and trixie containers, and on Ubuntu 24.04).
BOOKWORM = {
    "distribution": "Debian",
    "distribution_major_version": "12",
    "distribution_version": "12.12",
    "architecture": "x86_64",
}
TRIXIE = {
    "distribution": "Debian",
    "distribution_major_version": "13",
    "distribution_version": "13.2",
    "architecture": "x86_64",
}
NOBLE_ARM = {
    "distribution": "Ubuntu",
    "distribution_major_version": "24",
    "distribution_version": "24.04",
    "architecture": "aarch64",
}


def load_filters():
    return filter_plugins(REPO / "roles/common/filter_plugins/platforms.py")


@pytest.mark.parametrize("role", ["alluxio", "understore"])
def test_the_java_roles_load_the_same_filter(role):
    linked = REPO / "roles" / role / "filter_plugins" / "platforms.py"
    assert linked.resolve() == (REPO / "roles/common/filter_plugins/platforms.py").resolve()


@pytest.mark.parametrize(
    "facts,name,java_package,java_home",
    [
        (BOOKWORM, "debian-12", "openjdk-17-jre-headless", "/usr/lib/jvm/java-17-openjdk-amd64"),
        (TRIXIE, "debian-13", "openjdk-21-jre-headless", "/usr/lib/jvm/java-21-openjdk-amd64"),
        (NOBLE_ARM, "ubuntu-24.04", "openjdk-17-jre-headless", "/usr/lib/jvm/java-17-openjdk-arm64"),
    ],
)
def test_each_image_gets_its_own_jdk(facts, name, java_package, java_home):
    filters = load_filters()
    assert filters["megahour_detected_os"](facts) == name
    platform = filters["megahour_platform"](facts)
    assert (platform["name"], platform["java_package"], platform["java_home"]) == (
        name,
        java_package,
        java_home,
    )
    assert platform["python"] == PLATFORMS[name].python_text and platform["slurm"] == PLATFORMS[name].slurm


def test_an_unknown_image_names_the_host_and_the_table():
    facts = dict(BOOKWORM, distribution_major_version="11", hostname="gpu7")
    with pytest.raises(AnsibleFilterError, match=r"gpu7 runs debian-11.*platforms.py"):
        load_filters()["megahour_platform"](facts)


def test_without_facts_it_says_to_gather_them():
    with pytest.raises(AnsibleFilterError, match="gather facts"):
        load_filters()["megahour_platform"]({})
