from megahour.inventory.source import snapshot_from_listing

LISTING = {
    "_meta": {
        "hostvars": {
            "ctl": {"ansible_connection": "local", "megahour_vendor": "x"},
            "gpu-1": {"megahour_gpu": {"model": "h100", "count": 2}, "ansible_host": "10.0.0.1"},
        }
    },
    "all": {"children": ["ungrouped", "cluster"]},
    "cluster": {"children": ["controller", "compute"]},
    "controller": {"hosts": ["ctl"]},
    "compute": {"hosts": ["gpu-1"]},
}


def test_groups_include_hosts_of_child_groups():
    snap = snapshot_from_listing(LISTING)
    assert snap["groups"]["cluster"] == ["ctl", "gpu-1"]
    assert snap["groups"]["all"] == ["ctl", "gpu-1"]
    assert snap["groups"]["compute"] == ["gpu-1"]


def test_only_megahour_variables_are_kept():
    snap = snapshot_from_listing(LISTING)
    assert snap["hosts"]["gpu-1"] == {"megahour_gpu": {"model": "h100", "count": 2}}
    assert snap["hosts"]["ctl"] == {"megahour_vendor": "x"}


def test_absent_groups_stay_absent():
    assert "controller" not in snapshot_from_listing({"_meta": {"hostvars": {}}, "all": {}})["groups"]
