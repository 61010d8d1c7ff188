"""The alluxio role's filters (roles/alluxio/filter_plugins/alluxio_filters.py), which vars/main.yml calls.

The expected values are what the role's Jinja rendered before the derivations moved into the plugin.
"""

import pytest
from ansible.errors import AnsibleFilterError

from tests.conftest import REPO, filter_plugins

ARTIFACTS = [
    "org.alluxio:alluxio-core-server-master",
    "org.alluxio:alluxio-core-server-worker",
    "org.alluxio:alluxio-core-server-proxy",
    "org.alluxio:alluxio-underfs-local",
    "org.alluxio:alluxio-underfs-s3a",
]
PORTS = {"master_rpc": 19998, "master_web": 19999, "master_raft": 19200, "worker_rpc": 29999}


@pytest.fixture(scope="module")
def f():
    return filter_plugins(REPO / "roles/alluxio/filter_plugins/alluxio_filters.py")


def test_the_distribution_is_named_by_version_and_artifact_list(f):
    assert f["alluxio_dist_name"]("2.9.6", ARTIFACTS) == "alluxio-2.9.6-maven-466c967ea6"
    assert f["alluxio_dist_name"]("2.9.6", ARTIFACTS, "") == "alluxio-2.9.6-maven-466c967ea6"
    # Another list (or order) is another distribution, cached beside the first.
    assert f["alluxio_dist_name"]("2.9.6", ARTIFACTS[::-1]) != "alluxio-2.9.6-maven-466c967ea6"
    assert f["alluxio_dist_name"]("2.9.5", ARTIFACTS[:1]) == "alluxio-2.9.5-maven-857e748232"
    # The official tarball: its file name, not its directory.
    assert (
        f["alluxio_dist_name"]("2.9.6", ARTIFACTS, "/x/alluxio-2.9.6-bin.tar.gz")
        == "alluxio-2.9.6-alluxio-2.9.6-bin.tar.gz"
    )


def test_the_classpath_has_the_server_jar_only_from_the_official_tarball(f):
    # megahour's own jars (the S3 authenticator) come last, after Alluxio's.
    assert (
        f["alluxio_classpath"]("/etc/alluxio", "/opt/alluxio", "2.9.6")
        == "/etc/alluxio:/opt/alluxio/current/lib/*:/opt/alluxio/ext/*"
    )
    assert f["alluxio_classpath"]("/etc/alluxio", "/opt/alluxio", "2.9.6", "/x/y.tar.gz") == (
        "/etc/alluxio:/opt/alluxio/current/assembly/alluxio-server-2.9.6.jar:/opt/alluxio/current/lib/*"
        ":/opt/alluxio/ext/*"
    )


def test_the_authenticators_digest_follows_its_sources_not_its_build_output(f, tmp_path):
    (tmp_path / "src" / "io").mkdir(parents=True)
    (tmp_path / "pom.xml").write_text("<project/>")
    (tmp_path / "src" / "io" / "A.java").write_text("class A {}")
    first = f["alluxio_tree_digest"](str(tmp_path))
    assert len(first) == 12
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / "a.jar").write_bytes(b"jar")
    assert f["alluxio_tree_digest"](str(tmp_path)) == first
    (tmp_path / "src" / "io" / "A.java").write_text("class A { }")
    assert f["alluxio_tree_digest"](str(tmp_path)) != first
    # A file moved to another name is another tree.
    (tmp_path / "src" / "io" / "A.java").rename(tmp_path / "src" / "B.java")
    assert f["alluxio_tree_digest"](str(tmp_path)) not in (first,)
    with pytest.raises(AnsibleFilterError, match="is not a directory"):
        f["alluxio_tree_digest"](str(tmp_path / "missing"))


@pytest.mark.parametrize(
    "host,expected",
    [("ctl", ["master", "proxy"]), ("gpu-1", ["worker", "proxy"]), ("m2", ["master"]), ("store", [])],
)
def test_each_host_runs_its_daemons_in_start_order(f, host, expected):
    masters, workers, proxies = ["ctl", "m2"], ["gpu-1"], ["gpu-1", "ctl"]
    assert f["alluxio_roles"](host, masters, workers, proxies) == expected


def test_a_block_is_a_page_range_in_bytes(f):
    assert f["alluxio_block_bytes"]("1MB", 4) == 4 << 20
    assert f["alluxio_block_bytes"]("4MB", "2") == 8 << 20
    assert f["alluxio_block_bytes"]("1GB", 1) == 1 << 30
    with pytest.raises(AnsibleFilterError, match="alluxio_page_size 'lots'"):
        f["alluxio_block_bytes"]("lots", 4)


@pytest.mark.parametrize("masters", [[], ["10.0.0.1"], ["10.0.0.1", "10.0.0.2"]])
def test_fewer_than_three_masters_have_no_quorum_addresses(f, masters):
    assert f["alluxio_ha_site"](masters, PORTS) == {}


def test_three_masters_list_every_journal_and_rpc_address_in_order(f):
    masters = ["10.88.0.21", "10.88.0.22", "10.88.0.23"]
    assert f["alluxio_ha_site"](masters, PORTS) == {
        "alluxio.master.embedded.journal.addresses": "10.88.0.21:19200,10.88.0.22:19200,10.88.0.23:19200",
        "alluxio.master.rpc.addresses": "10.88.0.21:19998,10.88.0.22:19998,10.88.0.23:19998",
        "alluxio.standby.master.web.enabled": "false",
        "alluxio.master.embedded.journal.election.timeout.min": "3s",
        "alluxio.master.embedded.journal.election.timeout.max": "6s",
    }
    five = [f"m{i}" for i in range(5)]
    site = f["alluxio_ha_site"](five, {"master_raft": "3", "master_rpc": "1"})
    assert site["alluxio.master.rpc.addresses"] == "m0:1,m1:1,m2:1,m3:1,m4:1"


def test_a_worker_lists_its_page_dirs_and_their_sizes_in_the_same_order(f):
    dirs = [{"path": "/nvme0", "size": "1GB"}, {"path": "/nvme1", "size": "2TB"}]
    assert f["alluxio_worker_site"](dirs) == {
        "alluxio.worker.page.store.dirs": "/nvme0,/nvme1",
        "alluxio.worker.page.store.sizes": "1GB,2TB",
    }
    assert f["alluxio_worker_site"](dirs, False) == {}


def test_site_properties_later_dicts_win_and_none_drops_a_key(f):
    defaults = {"a": 1, "b": "x", "nested": {"k": 1}, "gone": None}
    host = {"b": "host"}
    user = {"a": None, "nested": {"other": 2}, "new": "y"}
    merged = f["alluxio_site_properties"](defaults, host, {}, user)
    # Not recursive: a dict value is replaced whole, as combine() without recursive=true did.
    assert merged == {"b": "host", "nested": {"other": 2}, "new": "y"}
    assert defaults == {"a": 1, "b": "x", "nested": {"k": 1}, "gone": None}  # inputs untouched
    assert f["alluxio_site_properties"]({"a": 1}) == {"a": 1}


def test_a_journal_records_the_masters_its_marker_names_sorted(f):
    marker = "10.0.0.3\n10.0.0.1\n\n10.0.0.2\n"
    assert f["alluxio_journal_members"](marker, 5, "10.0.0.1") == ["10.0.0.1", "10.0.0.2", "10.0.0.3"]


def test_a_journal_without_a_marker_was_formed_by_its_own_master_alone(f):
    # what every release before the marker left: one master's journal
    assert f["alluxio_journal_members"](None, "3", "10.0.0.1") == ["10.0.0.1"]


@pytest.mark.parametrize("marker", [None, "", "\n"])
def test_an_empty_journal_records_no_set(f, marker):
    assert f["alluxio_journal_members"](marker, 0, "10.0.0.1") == []


def test_journals_that_agree_or_are_new_are_no_mismatch(f):
    configured = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    recorded = {"ctl": ["10.0.0.3", "10.0.0.1", "10.0.0.2"], "gpu-2": [], "gpu-3": []}
    assert f["alluxio_journal_mismatch"](recorded, configured) == {}


def test_growing_one_master_to_three_is_a_mismatch_on_the_old_master_only(f):
    configured = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    recorded = {"ctl": ["10.0.0.1"], "gpu-2": [], "gpu-3": []}
    assert f["alluxio_journal_mismatch"](recorded, configured) == {"ctl": ["10.0.0.1"]}


def test_replacing_a_master_is_a_mismatch_on_every_old_one(f):
    recorded = {"a": ["1", "2", "3"], "b": ["1", "2", "3"], "d": []}
    assert f["alluxio_journal_mismatch"](recorded, ["1", "2", "4"]) == {
        "a": ["1", "2", "3"],
        "b": ["1", "2", "3"],
    }
