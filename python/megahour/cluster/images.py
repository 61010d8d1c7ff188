"""Recipes for the local cluster's images, and the cache key that decides rebuilds.

No registry is reachable, so the base image is bootstrapped from Debian
packages (debootstrap, then `podman import`), and a `podman build` layer adds
systemd, python3 and the host's extra CA certificates. Each image is tagged with
a digest of its recipe; a tag that already exists is reused, so images rebuild
only when the recipe (or a CA certificate) changes.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

RECIPE_VERSION = 1  # bump to force a rebuild after changing how images are made
BASE_REPO = "localhost/megahour-base"
NODE_REPO = "localhost/megahour-node"
RECIPE_LABEL = "megahour.recipe"
DEFAULT_SUITE = "bookworm"

NODE_PACKAGES = (
    "ca-certificates",
    "dbus",
    "iproute2",
    "procps",
    "python3",
    "python3-apt",
    "sudo",
    "systemd",
    "systemd-sysv",
)


@dataclass(frozen=True)
class Suite:
    """What differs between the Debian releases a node image can be built from."""

    alias: str  # the node image's tag besides its digest tag
    packages: tuple[str, ...] = NODE_PACKAGES


# Oldest release first: a suite missing from the host's apt sources is served from an older one's mirror
# (see debian_mirror_from_sources). bookworm keeps `latest`, which `cluster up` and the molecule
# scenarios run; any other release gets its own tag and never moves `latest`. Every NODE_PACKAGES name
# exists in trixie (checked against trixie/main), so both suites install the same list.
SUITES: dict[str, Suite] = {
    "bookworm": Suite(alias="latest"),
    "trixie": Suite(alias="trixie"),
}


def _digest(payload: object) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def debian_mirror_from_sources(texts: list[str], suite: str) -> str | None:
    """The first apt URI that serves ``suite``/main, from sources.list or deb822 texts.

    Reusing the host's mirror keeps image builds working behind whatever apt
    proxy or snapshot mirror the host already uses. A host lists only its own
    release, so a newer suite of SUITES (trixie on a bookworm host) takes the URI
    that serves the nearest older suite/main: one Debian archive serves every
    release under the same base URI. A security or updates URI never serves a
    bare suite, so it is never taken. None means "debootstrap's own default".
    """
    candidates = [suite]
    if suite in SUITES:
        older = list(SUITES)[: list(SUITES).index(suite)]
        candidates += reversed(older)
    for candidate in candidates:
        uri = _first_uri(texts, candidate)
        if uri is not None:
            return uri
    return None


def _first_uri(texts: list[str], suite: str) -> str | None:
    for text in texts:
        for uri in _deb822_uris(text, suite) + _one_line_uris(text, suite):
            return uri
    return None


def _deb822_uris(text: str, suite: str) -> list[str]:
    uris: list[str] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[0].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if suite in fields.get("suites", "").split() and "main" in fields.get("components", "").split():
            uris += fields.get("uris", "").split()[:1]
    return uris


def _one_line_uris(text: str, suite: str) -> list[str]:
    uris: list[str] = []
    for line in text.splitlines():
        # Drop the optional "[arch=amd64 signed-by=...]" block, which may hold spaces.
        words = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()
        if words[:1] != ["deb"]:
            continue
        words = words[1:]
        if len(words) >= 3 and words[1] == suite and "main" in words[2:]:
            uris.append(words[0])
    return uris


@dataclass(frozen=True)
class BaseRecipe:
    suite: str = DEFAULT_SUITE
    variant: str = "minbase"
    mirror: str | None = None

    def __post_init__(self) -> None:
        if self.suite not in SUITES:
            raise ValueError(f"suite {self.suite!r}: the node image is built from {' or '.join(SUITES)}")

    @property
    def tag(self) -> str:
        return f"{BASE_REPO}:{self.suite}-{self.digest}"

    @property
    def digest(self) -> str:
        return _digest(
            {"v": RECIPE_VERSION, "suite": self.suite, "variant": self.variant, "mirror": self.mirror}
        )

    def debootstrap_args(self, target: Path) -> list[str]:
        args = ["debootstrap", f"--variant={self.variant}", self.suite, str(target)]
        if self.mirror:
            args.append(self.mirror)
        return args


@dataclass(frozen=True)
class NodeRecipe:
    base: BaseRecipe
    ca_certificates: dict[str, bytes] = field(default_factory=dict)
    packages: tuple[str, ...] | None = None  # None: the base suite's (SUITES)

    def __post_init__(self) -> None:
        if self.packages is None:
            object.__setattr__(self, "packages", SUITES[self.base.suite].packages)

    @property
    def digest(self) -> str:
        certs = {
            name: hashlib.sha256(body).hexdigest() for name, body in sorted(self.ca_certificates.items())
        }
        # The Containerfile text covers the base tag and the packages; hashing it
        # means any edit to the recipe rebuilds the image.
        return _digest({"v": RECIPE_VERSION, "containerfile": self._body(), "certs": certs})

    @property
    def tag(self) -> str:
        return f"{NODE_REPO}:{self.digest}"

    @property
    def alias_tag(self) -> str:
        """The suite's moving tag: `:latest` for bookworm, `:trixie` for trixie (never `:latest`)."""
        return f"{NODE_REPO}:{SUITES[self.base.suite].alias}"

    def containerfile(self) -> str:
        first, rest = self._body().split("\n", 1)
        return f'{first}\nLABEL {RECIPE_LABEL}="{self.digest}"\n{rest}'

    def _body(self) -> str:
        packages = " ".join(self.packages or ())
        return "\n".join(
            [
                f"FROM {self.base.tag}",
                # The host's extra CAs go in before apt runs, so every HTTPS client
                # in the container (apt, pip, Maven) trusts an intercepting proxy.
                "COPY ca/ /usr/local/share/ca-certificates/",
                "ENV DEBIAN_FRONTEND=noninteractive",
                "RUN apt-get update \\",
                f" && apt-get install -y --no-install-recommends {packages} \\",
                " && update-ca-certificates \\",
                # Empty lists with an old mtime: Ansible's apt cache_valid_time then
                # refreshes them instead of trusting an empty cache.
                " && apt-get clean && rm -rf /var/lib/apt/lists/* && touch -d @0 /var/lib/apt/lists \\",
                # No consoles in a container; these units only fail or wait.
                " && systemctl mask getty.target console-getty.service systemd-logind.service \\",
                "      systemd-remount-fs.service dev-hugepages.mount sys-fs-fuse-connections.mount",
                "STOPSIGNAL SIGRTMIN+3",
                'CMD ["/sbin/init"]',
                "",
            ]
        )
