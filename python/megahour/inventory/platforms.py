"""The operating system images nodes may run (``megahour_os``), and what each ships that the deploy needs.

One table, read by validation (before any host is touched), the scaffold, the docs and the roles (through
the common role's ``megahour_platform`` filter). ``exercised`` says honestly whether CI converges the roles
on that image; the others are accepted because the roles use only what the image's archive has under the
same names, but no test has run them.

Every package the roles install has the same name in each image's archive except the ones named here
(the JDK: Debian 13 ships 21 and no 17), so this is the one place a new image's differences go.
"""

from __future__ import annotations

from dataclasses import dataclass

# The runtime's own floor (pyproject.toml requires-python); the nodes' venv is made from the image's python3.
RUNTIME_MIN_PYTHON = (3, 11)
# Ansible's machine names (ansible_facts.architecture) to Debian's.
DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


@dataclass(frozen=True)
class Platform:
    name: str  # the megahour_os value: <distribution>-<version>
    family: str  # the package family the roles' package names belong to
    python: tuple[int, int]  # the image's python3
    slurm: str  # the Slurm release the image's archive ships
    exercised: bool  # CI converges site.yml on it
    java: int = 17  # the OpenJDK release its archive ships (openjdk-N-jre-headless)

    def packages(self, arch: str) -> dict[str, str]:
        """The names the roles read that differ between images, for a node of machine ``arch``."""
        deb_arch = DEB_ARCH.get(arch, arch)
        return {
            "java_package": f"openjdk-{self.java}-jre-headless",
            "java_home": f"/usr/lib/jvm/java-{self.java}-openjdk-{deb_arch}",
        }

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
        # molecule `faults` converges site.yml on it, without the cache tier (Alluxio 2.9 is built for
        # Java 8/11 and is proved on 17 only), the warehouse and Airflow.
        Platform("debian-13", "debian", (3, 13), "24.11", True, java=21),
        Platform("ubuntu-22.04", "debian", (3, 10), "21.08", False),
        Platform("ubuntu-24.04", "debian", (3, 12), "23.11", False),
    )
}


def supported() -> list[str]:
    """The images a node may run: those whose python3 can run the megahour runtime."""
    return [name for name, p in PLATFORMS.items() if p.runtime_ok]
