"""The operating system images nodes may run (``megahour_os``), and what each ships that the deploy needs.

One table, read by validation (before any host is touched), the scaffold and the docs. ``exercised``
says honestly whether CI converges the roles on that image; the others are accepted because the roles
use only what the image's archive has under the same names, but no test has run them.
"""

from __future__ import annotations

from dataclasses import dataclass

# The runtime's own floor (pyproject.toml requires-python); the nodes' venv is made from the image's python3.
RUNTIME_MIN_PYTHON = (3, 11)


@dataclass(frozen=True)
class Platform:
    name: str  # the megahour_os value: <distribution>-<version>
    family: str  # the package family the roles' package names belong to
    python: tuple[int, int]  # the image's python3
    slurm: str  # the Slurm release the image's archive ships
    exercised: bool  # CI converges site.yml on it

    @property
    def python_text(self) -> str:
        return ".".join(map(str, self.python))

    @property
    def runtime_ok(self) -> bool:
        return self.python >= RUNTIME_MIN_PYTHON


PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in (
        Platform("debian-12", "debian", (3, 11), "22.05", True),
        Platform("ubuntu-22.04", "debian", (3, 10), "21.08", False),
        Platform("ubuntu-24.04", "debian", (3, 12), "23.11", False),
    )
}


def supported() -> list[str]:
    """The images a node may run: those whose python3 can run the megahour runtime."""
    return [name for name, p in PLATFORMS.items() if p.runtime_ok]
