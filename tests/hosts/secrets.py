"""The control node's generated secrets, for host checks that log in with the right password too: the
directory comes from MEGAHOUR_SECRETS_DIR (molecule's verify passes the inventory's ``.secrets``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def secret(name: str) -> str:
    folder = os.environ.get("MEGAHOUR_SECRETS_DIR", "")
    if not folder:
        pytest.fail("set MEGAHOUR_SECRETS_DIR to the inventory's secrets directory (molecule's verify does)")
    path = Path(folder) / name
    if not path.is_file():
        pytest.fail(f"{path} does not exist: deploy first, or point MEGAHOUR_SECRETS_DIR at its .secrets")
    return path.read_text().strip().split(" salt=", 1)[0]
