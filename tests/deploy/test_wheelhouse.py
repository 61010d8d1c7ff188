"""megahour.deploy.wheelhouse: the keys the roles' wheelhouses are cached under, and the build."""

import fnmatch
import shutil
import subprocess
import sys
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


# Targets: the nodes' Python and architecture.

X86_PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(36, 16, -1)] + ["manylinux2014_x86_64"]


def test_a_target_is_named_by_its_tag_and_platforms():
    target = wheelhouse.Target("3.13", "x86_64")
    assert (target.tag, target.abi) == ("cp313-x86_64", "cp313")
    assert target.platforms == X86_PLATFORMS
    assert wheelhouse.Target("3.12", "aarch64").platforms[-1] == "manylinux2014_aarch64"
    assert wheelhouse.Target.parse("3.13", "x86_64") == target
    assert wheelhouse.Target.parse(" 3.13 ", "x86_64") == target
    assert wheelhouse.Target.parse(None, None) is None
    assert wheelhouse.Target.parse("", "") is None


@pytest.mark.parametrize(
    "python,arch,message",
    [
        (
            "3.13.1",
            "x86_64",
            r"target python '3.13.1' is not a CPython 3 MAJOR.MINOR version: give it as 3.13",
        ),
        ("3", "x86_64", "target python '3' is not"),
        ("2.7", "x86_64", "target python '2.7' is not"),
        ("py3.13", "x86_64", "target python 'py3.13' is not"),
        ("3.013", "x86_64", "target python '3.013' is not"),
        (3.13, "x86_64", "target python 3.13 is not"),
        ("3.13", "amd64", r"target arch 'amd64' is not one of x86_64, aarch64: .*ansible_facts.architecture"),
        ("3.13", "arm64", "amd64 is x86_64, arm64 is aarch64"),
        ("3.13", "i686", "target arch 'i686'"),
    ],
)
def test_a_bad_target_says_what_to_give(python, arch, message):
    with pytest.raises(wheelhouse.WheelhouseError, match=message):
        wheelhouse.Target(python, arch)


@pytest.mark.parametrize("python,arch", [("3.13", None), (None, "x86_64"), ("", "aarch64")])
def test_a_target_needs_both_python_and_arch(python, arch):
    with pytest.raises(wheelhouse.WheelhouseError, match="give both"):
        wheelhouse.Target.parse(python, arch)


def test_a_target_suffixes_the_key(source, tmp_path):
    target = wheelhouse.Target("3.13", "x86_64")
    plain = wheelhouse.plan(source, tmp_path, extras=["a"], requirements=["x==1"])
    targeted = wheelhouse.plan(source, tmp_path, extras=["a"], requirements=["x==1"], target=target)
    assert targeted.key == f"{plain.key}-cp313-x86_64"
    assert targeted.path == tmp_path / targeted.key
    assert targeted.specs == plain.specs
    assert (targeted.source_dir, targeted.extras, targeted.target) == (str(source), ("a",), target)
    assert wheelhouse.plan(source, tmp_path, archive=True, target=target).path.name.endswith(
        "-cp313-x86_64.tar"
    )
    pins = wheelhouse.plan(
        source, tmp_path, pins_of_extra="train", target=wheelhouse.Target("3.12", "aarch64")
    )
    assert pins.key == wheelhouse.plan(source, tmp_path, pins_of_extra="train").key + "-cp312-aarch64"
    assert pins.source_dir is None and pins.extras == ()
    assert pins.marker == f".digest-{pins.key}"


class FakePython:
    """Stands in for the control node's interpreter: answers the probe, `pip wheel` and `pip download`."""

    def __init__(self, probe="cpython linux 3.11 x86_64", fail_download=False):
        self.calls = []
        self.probe = probe
        self.fail_download = fail_download

    def __call__(self, argv, **_kwargs):
        self.calls.append(argv)
        if argv[1] == "-c":
            return subprocess.CompletedProcess(argv, 0, self.probe + "\n", "")
        assert argv[1:3] == ["-m", "pip"]
        if argv[3] == "wheel":
            wheel_dir = Path(argv[argv.index("--wheel-dir") + 1])
            assert wheel_dir.name.startswith(".") and wheel_dir.name.endswith(".tmp")
            (wheel_dir / "megahour-0.1.0-py3-none-any.whl").write_bytes(b"wheel")
            return subprocess.CompletedProcess(argv, 0, "", "")
        assert argv[3] == "download"
        if self.fail_download:
            return subprocess.CompletedProcess(argv, 1, "", "ERROR: No matching distribution found for av")
        dest = Path(argv[argv.index("--dest") + 1])
        (dest / "PyYAML-6.0.3-cp313-cp313-manylinux_2_17_x86_64.whl").write_bytes(b"wheel")
        return subprocess.CompletedProcess(argv, 0, "", "")


def cross_download_argv(python, tmp, python_version, abi, platforms, specs):
    return [
        python, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
        "--python-version", python_version, "--implementation", "cp", "--abi", abi,
        *[arg for platform in platforms for arg in ("--platform", platform)],
        "--dest", str(tmp), *specs,
    ]  # fmt: skip


def test_the_interpreters_own_target_builds_with_pip_wheel_as_before(source, tmp_path):
    target = wheelhouse.Target("3.11", "x86_64")
    planned = wheelhouse.plan(source, tmp_path / "cache", extras=["a"], requirements=["x==1"], target=target)
    python = FakePython()
    assert wheelhouse.ensure(planned, "/venv/bin/python", run=python)
    probe, build = python.calls
    assert probe[:2] == ["/venv/bin/python", "-c"]
    tmp = build[6]
    assert build == [
        "/venv/bin/python",
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--wheel-dir",
        tmp,
        f"{source}[a]",
        "x==1",
    ]
    assert [p.name for p in planned.path.iterdir()] == ["megahour-0.1.0-py3-none-any.whl"]
    assert [p.name for p in planned.path.parent.iterdir()] == [planned.key]
    assert not wheelhouse.ensure(planned, "/venv/bin/python", run=python)
    assert len(python.calls) == 2  # present: not even the probe


def test_no_target_asks_the_interpreter_nothing(source, tmp_path):
    planned = wheelhouse.plan(source, tmp_path / "cache")
    python = FakePython()
    assert wheelhouse.ensure(planned, "python3", run=python)
    assert [call[3] for call in python.calls] == ["wheel"]


def test_a_cross_source_build_makes_megahours_wheel_then_downloads_binary_wheels(source, tmp_path):
    target = wheelhouse.Target("3.13", "x86_64")
    planned = wheelhouse.plan(
        source, tmp_path / "cache", extras=["a", "b"], requirements=["x==1"], target=target
    )
    python = FakePython()
    assert wheelhouse.ensure(planned, "/venv/bin/python", run=python)
    probe, build, download = python.calls
    assert probe[:2] == ["/venv/bin/python", "-c"]
    tmp = Path(build[7])
    assert tmp.parent == tmp_path / "cache" and tmp.name.startswith(f".{planned.key}.")
    assert build == [
        "/venv/bin/python",
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--wheel-dir",
        str(tmp),
        str(source),
    ]
    wheel = tmp / "megahour-0.1.0-py3-none-any.whl"
    assert download == cross_download_argv(
        "/venv/bin/python", tmp, "3.13", "cp313", X86_PLATFORMS, [f"{wheel}[a,b]", "x==1"]
    )
    assert sorted(p.name for p in planned.path.iterdir()) == [
        "PyYAML-6.0.3-cp313-cp313-manylinux_2_17_x86_64.whl",
        "megahour-0.1.0-py3-none-any.whl",
    ]
    assert [p.name for p in planned.path.parent.iterdir()] == [planned.key]


def test_a_cross_source_build_without_extras_downloads_the_wheel_itself(source, tmp_path):
    planned = wheelhouse.plan(source, tmp_path / "cache", target=wheelhouse.Target("3.12", "x86_64"))
    python = FakePython()
    assert wheelhouse.ensure(planned, "python3", run=python)
    tmp = Path(python.calls[1][7])
    assert python.calls[2][-1] == str(tmp / "megahour-0.1.0-py3-none-any.whl")
    assert python.calls[2][python.calls[2].index("--abi") + 1] == "cp312"


@pytest.mark.parametrize(
    "probe",
    [
        "cpython linux 3.11 aarch64",  # another machine
        "pypy linux 3.13 x86_64",  # another implementation
        "cpython darwin 3.13 arm64",  # a Mac control node
        "cpython darwin 3.13 x86_64",  # not Linux, though the version and machine match
    ],
)
def test_any_other_interpreter_cross_builds(source, tmp_path, probe):
    target = wheelhouse.Target("3.13", "x86_64")
    planned = wheelhouse.plan(source, tmp_path / "cache", pins_of_extra="train", target=target)
    python = FakePython(probe=probe)
    assert wheelhouse.ensure(planned, "python3", run=python)
    _probe, download = python.calls  # a pins wheelhouse: no megahour wheel, the pins alone
    tmp = Path(download[download.index("--dest") + 1])
    assert download == cross_download_argv(
        "python3", tmp, "3.13", "cp313", X86_PLATFORMS, ["torch==2.13.0", "numpy>=1.26"]
    )


def test_an_aarch64_target_asks_for_aarch64_platforms(source, tmp_path):
    planned = wheelhouse.plan(
        source, tmp_path / "cache", pins_of_extra="train", target=wheelhouse.Target("3.11", "aarch64")
    )
    python = FakePython()
    assert wheelhouse.ensure(planned, "python3", run=python)
    download = python.calls[1]
    platforms = [download[i + 1] for i, arg in enumerate(download) if arg == "--platform"]
    assert platforms == [f"manylinux_2_{minor}_aarch64" for minor in range(36, 16, -1)] + [
        "manylinux2014_aarch64"
    ]


@pytest.mark.parametrize("archive", [False, True])
def test_a_failed_cross_build_names_the_target_and_the_fix(source, tmp_path, archive):
    target = wheelhouse.Target("3.13", "aarch64")
    planned = wheelhouse.plan(source, tmp_path / "cache", extras=["episodes"], target=target, archive=archive)
    with pytest.raises(wheelhouse.WheelhouseError) as failed:
        wheelhouse.ensure(planned, "python3", run=FakePython(fail_download=True))
    message = str(failed.value)
    assert "exit code 1: ERROR: No matching distribution found for av" in message
    assert "for the nodes' CPython 3.13 on aarch64 (cp313-aarch64)" in message
    assert "control node's python3 (cpython 3.11 on linux x86_64)" in message
    assert (
        "a dependency without a binary wheel for cp313-aarch64 needs either a control node Python" in message
    )
    assert "or a pin of a version with wheels for it" in message
    assert list((tmp_path / "cache").iterdir()) == []


def test_an_interpreter_that_cannot_say_what_it_is_fails_before_building(source, tmp_path):
    planned = wheelhouse.plan(source, tmp_path / "cache", target=wheelhouse.Target("3.13", "x86_64"))

    def broken(argv, **_kwargs):
        return subprocess.CompletedProcess(argv, 127, "", "python9: not found")

    with pytest.raises(
        wheelhouse.WheelhouseError, match=r"cannot ask python9 .*\(exit code 127\): python9: not found"
    ):
        wheelhouse.ensure(planned, "python9", run=broken)
    assert not (tmp_path / "cache").exists()


def test_a_source_that_is_not_pure_python_cannot_cross(source, tmp_path):
    planned = wheelhouse.plan(source, tmp_path / "cache", target=wheelhouse.Target("3.13", "x86_64"))

    def compiled(argv, **kwargs):
        if argv[1] == "-c":
            return subprocess.CompletedProcess(argv, 0, "cpython linux 3.11 x86_64\n", "")
        wheel_dir = Path(argv[argv.index("--wheel-dir") + 1])
        (wheel_dir / "megahour-0.1.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"wheel")
        return subprocess.CompletedProcess(argv, 0, "", "")

    with pytest.raises(wheelhouse.WheelhouseError, match=r"not one pure-Python \(py3-none-any\) wheel"):
        wheelhouse.ensure(planned, "python3", run=compiled)
    assert list((tmp_path / "cache").iterdir()) == []


@pytest.mark.integration
def test_a_real_cross_build_for_python_3_13(tmp_path):
    """pip and PyPI: megahour (no extras: PyYAML, rich) for CPython 3.13 on x86_64, then 3.11's own path."""
    source = tmp_path / "src"
    shutil.copytree(
        REPO / "python", source / "python", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    calls = []

    def recorded(argv, **kwargs):
        calls.append(argv)
        return subprocess.run(argv, **kwargs, timeout=240)

    cross = wheelhouse.plan(source, tmp_path / "cache", target=wheelhouse.Target("3.13", "x86_64"))
    assert wheelhouse.ensure(cross, sys.executable, run=recorded)
    names = sorted(p.name for p in cross.path.iterdir())
    assert any(fnmatch.fnmatch(n.lower(), "pyyaml-*-cp313-*manylinux*x86_64*.whl") for n in names), names
    assert any(fnmatch.fnmatch(n, "megahour-*-py3-none-any.whl") for n in names), names
    assert any(n.startswith("rich-") for n in names), names
    assert [call[3] for call in calls[1:]] == ["wheel", "download"]

    own = wheelhouse.interpreter(sys.executable)[0]
    if own is None or own.python != "3.11":
        pytest.skip(f"this machine's Python is {own}, not 3.11 on a known architecture")
    calls.clear()
    native = wheelhouse.plan(source, tmp_path / "cache", target=own)
    assert native.key.endswith(f"-cp311-{own.arch}")
    assert wheelhouse.ensure(native, sys.executable, run=recorded)
    assert calls[1][:6] == [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir"]
    assert len(calls) == 2  # the probe, then `pip wheel` as before targets existed
    names = sorted(p.name for p in native.path.iterdir())
    assert any(fnmatch.fnmatch(n.lower(), "pyyaml-*-cp311-*.whl") for n in names), names
