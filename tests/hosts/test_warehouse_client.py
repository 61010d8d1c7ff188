"""A warehouse client node, from outside: the password file only root and the megahour group read, and
the settings file that points at it (holding no password). Molecule `warehouse` runs it after converge:
``pytest --hosts=podman://wh-node tests/hosts/test_warehouse_client.py``."""

from __future__ import annotations

import yaml


def test_the_password_file_is_private_to_the_megahour_group(host):
    f = host.file("/etc/megahour/warehouse.password")
    assert f.exists and (f.user, f.group, f.mode) == ("root", "megahour", 0o640)


def test_the_settings_name_the_password_file_and_hold_no_password(host):
    settings = host.file("/etc/megahour/warehouse.yml")
    password = host.file("/etc/megahour/warehouse.password").content_string.strip()
    assert yaml.safe_load(settings.content_string)["password_file"] == "/etc/megahour/warehouse.password"
    assert len(password) >= 16 and password not in settings.content_string
