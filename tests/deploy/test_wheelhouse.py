"""megahour.deploy.wheelhouse: the keys the roles' wheelhouses are cached under, and the build."""

import subprocess
import tarfile
from pathlib import Path

import pytest

from megahour.deploy import wheelhouse
from tests.conftest import REPO

# The roles' shell pipeline this module replaced; a key must stay what it computed, so caches stay valid.
SHELL_DIGEST = r"""
set -euo pipefail
cd "$1"; shift
{ find pyproject.toml python -type f \( -name '*.py' -o -name '*.toml' -o -name '*.yml' -o -name '*.txt' \) \
    -not -path '*/__pycache__/*' -not -path '*.egg-info/*' | LC_ALL=C sort | xargs sha256sum
  printf '%s\n' "$@"
} | sha256sum | cut -c1-16
"""
TRAIN_KEY_SNIPPET = """
import hashlib, sys, tomllib
with open(sys.argv[1], "rb") as handle:
    pins = tomllib.load(handle)["project"]["optional-dependencies"]["train"]
print("train-" + hashlib.sha256(" ".join(pins).encode()).hexdigest()[:16], *pins)
"""


def shell_digest(source: Path, *lines: str) -> str:
    proc = subprocess.run(
        ["bash", "-c", SHELL_DIGEST, "digest", str(source), *lines],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip()


@pytest.fixture
def source(tmp_path):
    """A small megahour-like checkout, with what the key must and must not cover."""
    root = tmp_path / "src"
    (root / "python" / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "python" / "pkg.egg-info").mkdir()
    (root / "pyproject.toml").write_text(
        '[project]\nname = "pkg"\n[project.optional-dependencies]\ntrain = ["torch==2.13.0", "numpy>=1.26"]\n'
    )
    (root / "python" / "pkg" / "__init__.py").write_text("x = 1\n")
    (root / "python" / "pkg" / "profiles.yml").write_text("a: 1\n")
    (root / "python" / "pkg" / "B_upper.txt").write_text("sorted before lower case in C order\n")
    (root / "python" / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").write_bytes(b"\0")
    (root / "python" / "pkg" / "__pycache__" / "stale.py").write_text("ignored\n")
    (root / "python" / "pkg.egg-info" / "SOURCES.txt").write_text("ignored\n")
    (root / "python" / "pkg" / "README.md").write_text("not a source suffix\n")
    (root / "python" / "pkg" / "link.py").symlink_to(root / "python" / "pkg" / "__init__.py")
    return root


def test_the_source_key_is_the_shell_digest_of_this_checkout():
    for requirements, extras in [((), ("episodes", "curation")), (("apache-airflow[postgres]==3.3.2",), ())]:
        key = wheelhouse.source_key(REPO, requirements, extras)
        assert key == shell_digest(REPO, *requirements, *extras)
        assert len(key) == 16


@pytest.mark.parametrize("lines", [(), ("episodes",), ("torch==2.13.0", "episodes", "curation")])
def test_the_source_key_is_the_shell_digest_with_any_requirements(source, lines):
    assert wheelhouse.source_key(source, lines[:1], lines[1:]) == shell_digest(source, *lines)


def test_the_key_covers_sources_only(source):
    assert wheelhouse.source_files(source) == [
        "pyproject.toml",
        "python/pkg/B_upper.txt",
        "python/pkg/__init__.py",
        "python/pkg/profiles.yml",
    ]
    before = wheelhouse.source_key(source, (), ("episodes",))
    assert wheelhouse.source_key(source, (), ("episodes",)) == before  # stable
    (source / "python" / "pkg" / "README.md").write_text("edited\n")
    (source / "python" / "pkg" / "__pycache__" / "stale.py").write_text("edited\n")
    (source / "python" / "pkg.egg-info" / "SOURCES.txt").write_text("edited\n")
    assert wheelhouse.source_key(source, (), ("episodes",)) == before
    (source / "python" / "pkg" / "__init__.py").write_text("x = 2\n")
    edited = wheelhouse.source_key(source, (), ("episodes",))
    assert edited != before
    assert wheelhouse.source_key(source, (), ("episodes", "curation")) != edited
    assert wheelhouse.source_key(source, ("numpy",), ("episodes",)) != edited


def test_a_directory_without_sources_is_refused(tmp_path):
    with pytest.raises(wheelhouse.WheelhouseError, match="not megahour's checkout"):
        wheelhouse.source_key(tmp_path)


def test_the_pins_key_is_the_one_the_train_wheelhouse_had():
    proc = subprocess.run(
        ["python3", "-c", TRAIN_KEY_SNIPPET, str(REPO / "pyproject.toml")], capture_output=True, text=True
    )
    key, *pins = proc.stdout.split()
    planned = wheelhouse.plan(REPO, "/cache", pins_of_extra="train")
    assert (planned.key, planned.specs) == (key, pins)
    assert planned.path == Path("/cache") / key


def test_the_pins_key_ignores_source_edits(source):
    before = wheelhouse.plan(source, "/cache", pins_of_extra="train")
    (source / "python" / "pkg" / "__init__.py").write_text("x = 3\n")
    assert wheelhouse.plan(source, "/cache", pins_of_extra="train") == before
    assert before.specs == ["torch==2.13.0", "numpy>=1.26"]
    with pytest.raises(wheelhouse.WheelhouseError, match="one extra's pins"):
        wheelhouse.plan(source, "/cache", pins_of_extra="train", extras=["episodes"])
    with pytest.raises(wheelhouse.WheelhouseError, match="'nope' extra"):
        wheelhouse.plan(source, "/cache", pins_of_extra="nope")


def test_a_source_plan_builds_megahour_with_its_extras(source, tmp_path):
    planned = wheelhouse.plan(source, tmp_path / "cache", extras=["a", "b"], requirements=["x==1"])
    assert planned.specs == [f"{source}[a,b]", "x==1"]
    assert planned.path == tmp_path / "cache" / planned.key
    assert wheelhouse.plan(source, tmp_path, archive=True).path.name.endswith(".tar")
    assert wheelhouse.plan(source, tmp_path).specs == [str(source)]


class FakePip:
    """Stands in for `python -m pip wheel`: writes one wheel per spec into --wheel-dir."""

    def __init__(self, returncode=0):
        self.calls = []
        self.returncode = returncode

    def __call__(self, argv, **_kwargs):
        self.calls.append(argv)
        wheel_dir = Path(argv[argv.index("--wheel-dir") + 1])
        assert wheel_dir.name.startswith(".") and wheel_dir.name.endswith(".tmp")  # hidden until published
        if self.returncode == 0:
            for i, _spec in enumerate(argv[argv.index("--wheel-dir") + 2 :]):
                (wheel_dir / f"pkg{i}-1.0-py3-none-any.whl").write_bytes(b"wheel")
        return subprocess.CompletedProcess(argv, self.returncode, "", "ERROR: no matching distribution")


def test_ensure_builds_a_directory_once(source, tmp_path):
    planned = wheelhouse.plan(source, tmp_path / "cache", extras=["a"])
    pip = FakePip()
    assert wheelhouse.ensure(planned, "/venv/bin/python", run=pip)
    assert pip.calls[0][:6] == ["/venv/bin/python", "-m", "pip", "wheel", "--quiet", "--wheel-dir"]
    assert pip.calls[0][7:] == [f"{source}[a]"]
    assert sorted(p.name for p in planned.path.iterdir()) == ["pkg0-1.0-py3-none-any.whl"]
    assert [p.name for p in planned.path.parent.iterdir()] == [planned.key]  # no temporary left
    assert planned.present
    assert not wheelhouse.ensure(planned, "/venv/bin/python", run=pip)
    assert len(pip.calls) == 1


def test_ensure_builds_one_tar_with_the_marker(source, tmp_path):
    planned = wheelhouse.plan(source, tmp_path / "cache", requirements=["x==1"], archive=True)
    assert wheelhouse.ensure(planned, "python3", run=FakePip())
    assert [p.name for p in planned.path.parent.iterdir()] == [f"{planned.key}.tar"]
    with tarfile.open(planned.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert set(members) == {
        ".",
        "./pkg0-1.0-py3-none-any.whl",
        "./pkg1-1.0-py3-none-any.whl",
        f"./.digest-{planned.key}",
    }
    # The "." entry's mode reaches the directory it is unpacked into on the node.
    assert members["."].mode == 0o755
    assert members[f"./.digest-{planned.key}"].size == 0


@pytest.mark.parametrize("archive", [False, True])
def test_a_failed_pip_leaves_nothing_behind(source, tmp_path, archive):
    planned = wheelhouse.plan(source, tmp_path / "cache", archive=archive)
    with pytest.raises(wheelhouse.WheelhouseError, match="exit code 1: ERROR: no matching distribution"):
        wheelhouse.ensure(planned, "python3", run=FakePip(returncode=1))
    assert list((tmp_path / "cache").iterdir()) == []
