"""Host checks with testinfra: what a deployed host must look like from outside (sockets, refusals, file
modes). They run only against hosts named with ``--hosts`` (molecule's verify runs them on its
containers, ``podman://NAME``); without it they are skipped, never run against this machine."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("hosts", default=None):
        return
    skip = pytest.mark.skip(reason="a host check: run with --hosts=podman://NAME (molecule verify does)")
    here = str(config.rootpath / "tests" / "hosts")
    for item in items:
        if str(item.path).startswith(here):
            item.add_marker(skip)
