from hypothesis import given
from hypothesis import strategies as st

from megahour.cluster.images import BaseRecipe, NodeRecipe, debian_mirror_from_sources

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
