import pytest
from hypothesis import given
from hypothesis import strategies as st

from megahour.cluster import lifecycle
from megahour.cluster.images import DEFAULT_SUITE, SUITES, BaseRecipe, NodeRecipe, debian_mirror_from_sources
from megahour.cluster.spec import ClusterSpec

DEB822 = """\
Types: deb
# http://snapshot.example/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def test_mirror_from_deb822_sources():
    assert debian_mirror_from_sources([DEB822], "bookworm") == "http://mirror.example/debian"


def test_security_suite_alone_is_not_a_mirror():
    only_security = DEB822.split("\n\n")[1]
    assert debian_mirror_from_sources([only_security], "bookworm") is None


def test_mirror_from_one_line_sources_with_options():
    text = "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main contrib\n"
    assert debian_mirror_from_sources([text], "bookworm") == "http://one.example/debian"


def test_deb_src_and_other_suites_are_ignored():
    text = "deb-src http://a.example/debian bookworm main\ndeb http://b.example/debian trixie main\n"
    assert debian_mirror_from_sources([text], "bookworm") is None


@given(st.lists(st.text(max_size=300), max_size=4))
def test_parser_never_invents_a_mirror(texts):
    uri = debian_mirror_from_sources(texts, "bookworm")
    assert uri is None or any(uri in t for t in texts)


def test_debootstrap_args_use_the_mirror_only_when_known():
    assert BaseRecipe().debootstrap_args("/r")[-1] == "/r"
    assert (
        BaseRecipe(mirror="http://m.example/debian").debootstrap_args("/r")[-1] == "http://m.example/debian"
    )


def test_recipe_digest_tracks_certificates_and_base():
    base = BaseRecipe()
    plain = NodeRecipe(base)
    with_ca = NodeRecipe(base, {"corp.crt": b"-----BEGIN CERTIFICATE-----\n"})
    other_base = NodeRecipe(BaseRecipe(mirror="http://m.example/debian"))
    assert len({plain.tag, with_ca.tag, other_base.tag}) == 3
    assert NodeRecipe(base).tag == plain.tag  # stable: same recipe, same cached image


def test_containerfile_labels_the_digest_and_installs_systemd():
    recipe = NodeRecipe(BaseRecipe())
    text = recipe.containerfile()
    assert text.startswith(f"FROM {recipe.base.tag}\n")
    assert f'LABEL megahour.recipe="{recipe.digest}"' in text
    assert "systemd-sysv" in text and "update-ca-certificates" in text
    assert 'CMD ["/sbin/init"]' in text


# --- suites: bookworm (`latest`) and trixie ---------------------------------------------------------------

ONE_LINE_BOOKWORM = (
    "deb http://mirror.example/debian bookworm main\n"
    "deb http://mirror.example/debian-security bookworm-security main\n"
)


def test_trixie_mirror_comes_from_the_host_trixie_source_when_listed():
    text = DEB822 + "\nTypes: deb\nURIs: http://other.example/debian\nSuites: trixie\nComponents: main\n"
    assert debian_mirror_from_sources([text], "trixie") == "http://other.example/debian"


def test_trixie_mirror_is_derived_from_the_bookworm_uri_of_the_same_archive():
    assert debian_mirror_from_sources([DEB822], "trixie") == "http://mirror.example/debian"
    assert debian_mirror_from_sources([ONE_LINE_BOOKWORM], "trixie") == "http://mirror.example/debian"


def test_trixie_mirror_is_never_derived_from_a_security_or_updates_uri():
    only_security = DEB822.split("\n\n")[1]
    updates = "deb http://mirror.example/debian bookworm-updates main\n"
    assert debian_mirror_from_sources([only_security, updates], "trixie") is None


def test_bookworm_mirror_is_never_derived_from_a_newer_suite():
    assert debian_mirror_from_sources(["deb http://b.example/debian trixie main\n"], "bookworm") is None


@given(st.lists(st.text(max_size=300), max_size=4))
def test_parser_never_invents_a_trixie_mirror(texts):
    uri = debian_mirror_from_sources(texts, "trixie")
    assert uri is None or any(uri in t for t in texts)


def test_node_tags_per_suite():
    bookworm = NodeRecipe(BaseRecipe())
    trixie = NodeRecipe(BaseRecipe(suite="trixie"))
    assert bookworm.alias_tag == "localhost/megahour-node:latest"
    assert trixie.alias_tag == "localhost/megahour-node:trixie"
    assert trixie.base.tag.startswith("localhost/megahour-base:trixie-")
    assert trixie.tag.startswith("localhost/megahour-node:") and trixie.tag != trixie.alias_tag
    assert ClusterSpec().image == bookworm.alias_tag  # `cluster up` runs the bookworm image


def test_digest_differs_by_suite_with_the_same_mirror_and_certificates():
    certs = {"corp.crt": b"-----BEGIN CERTIFICATE-----\n"}
    mirror = "http://m.example/debian"
    bookworm = NodeRecipe(BaseRecipe(mirror=mirror), certs)
    trixie = NodeRecipe(BaseRecipe(suite="trixie", mirror=mirror), certs)
    assert bookworm.base.digest != trixie.base.digest
    assert bookworm.digest != trixie.digest and bookworm.tag != trixie.tag
    assert trixie.containerfile().startswith(f"FROM {trixie.base.tag}\n")
    assert BaseRecipe(suite="trixie").debootstrap_args("/r")[:3] == [
        "debootstrap",
        "--variant=minbase",
        "trixie",
    ]


def test_packages_come_from_the_suite_table():
    assert set(SUITES) == {"bookworm", "trixie"} and next(iter(SUITES)) == DEFAULT_SUITE
    for suite, entry in SUITES.items():
        recipe = NodeRecipe(BaseRecipe(suite=suite))
        assert recipe.packages == entry.packages
        assert {"systemd", "systemd-sysv", "python3", "python3-apt"} <= set(recipe.packages)
        assert " ".join(entry.packages) in recipe.containerfile()
    assert NodeRecipe(BaseRecipe(), packages=("systemd",)).packages == ("systemd",)


def test_unknown_suite_is_refused():
    with pytest.raises(ValueError, match="bookworm or trixie"):
        BaseRecipe(suite="sid")


class _Console:
    def print(self, *args, **kwargs):
        pass


def _ensure(monkeypatch, suite):
    """ensure_images with cached images: returns the `podman tag` calls it made."""
    calls = []
    monkeypatch.setattr(lifecycle.podman, "image_exists", lambda tag: True)
    monkeypatch.setattr(lifecycle.podman, "podman", lambda args, **kw: calls.append(list(args)))
    monkeypatch.setattr(lifecycle, "host_ca_certificates", dict)
    tag = lifecycle.ensure_images(_Console(), suite=suite)
    return tag, [c for c in calls if c[:1] == ["tag"]]


def test_trixie_image_is_tagged_trixie_and_does_not_move_latest(monkeypatch):
    tag, tags = _ensure(monkeypatch, "trixie")
    assert tags == [["tag", tag, "localhost/megahour-node:trixie"]]
    assert not any("megahour-node:latest" in arg for call in tags for arg in call)


def test_bookworm_image_still_moves_latest(monkeypatch):
    tag, tags = _ensure(monkeypatch, "bookworm")
    assert tags == [["tag", tag, "localhost/megahour-node:latest"]]
    assert tag == lifecycle.host_recipes().tag  # the default recipe `cluster up` builds
