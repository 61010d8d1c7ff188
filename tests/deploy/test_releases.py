"""Releases: pyproject.toml's version, the recorded commits, their tags, and extracting the previous tree."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from megahour.deploy import releases
from megahour.deploy.releases import Release, ReleaseError

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = (REPO / "pyproject.toml").read_text()
SHA_A = "a" * 40
SHA_B = "b" * 40


def pyproject(version: str, table: str = "") -> str:
    return f'[project]\nname = "megahour"\nversion = "{version}"\n\n[tool.megahour.releases]\n{table}'


def test_previous_is_the_newest_release_older_than_the_checkout() -> None:
    text = pyproject("0.3.0.dev0", f'"0.2.0" = "{SHA_B}"\n"0.1.0" = "{SHA_A}"\n"0.10.0" = "{SHA_A}"\n')
    recorded = releases.recorded(text)
    assert [r.version for r in recorded] == ["0.1.0", "0.2.0", "0.10.0"]  # by version, not by text
    assert releases.previous(recorded, releases.current_version(text)) == Release("0.2.0", SHA_B)
    # A checkout that is itself a release upgrades from the one before it.
    assert releases.previous(recorded, "0.2.0") == Release("0.1.0", SHA_A)


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        (pyproject("0.1.0"), "record the last one's version and commit there"),
        (pyproject("one", f'"0.1.0" = "{SHA_A}"\n'), "is not a PEP 440 version"),
        (pyproject("0.2.0", '"0.1.0" = "1557dc4"\n'), "the full 40-hex id (git rev-parse v0.1.0)"),
        ('[project]\nname = "megahour"\n', 'add version = "0.1.0"'),
    ],
)
def test_a_bad_record_names_the_fix(text: str, fix: str) -> None:
    with pytest.raises(ReleaseError, match=fix.replace("(", r"\(").replace(")", r"\)")):
        releases.previous(releases.recorded(text), releases.current_version(text))


def test_each_recorded_release_is_its_commits_version_and_its_tag_when_the_clone_has_it() -> None:
    recorded = releases.recorded(PYPROJECT)
    assert recorded, "the first release (0.1.0) is recorded"
    for release in recorded:
        text = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{release.commit}:pyproject.toml"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert releases.current_version(text) == release.version
        tagged = releases.tag_commit(REPO, release)
        assert tagged in (None, release.commit), f"tag {release.tag} points elsewhere than the record"
    assert releases.previous(recorded, releases.current_version(PYPROJECT)) == recorded[-1]


def test_extract_writes_the_tree_once_and_redoes_a_partial_one(tmp_path: Path) -> None:
    release = releases.recorded(PYPROJECT)[-1]
    tree = releases.extract(REPO, release, tmp_path)
    assert tree == tmp_path / release.version
    assert releases.current_version((tree / "pyproject.toml").read_text()) == release.version
    assert (tree / "playbooks" / "site.yml").is_file()
    (tree / "playbooks" / "site.yml").write_text("changed")
    assert releases.extract(REPO, release, tmp_path) == tree  # marked complete: kept as it is
    assert (tree / "playbooks" / "site.yml").read_text() == "changed"
    (tree / releases.EXTRACTED_MARKER).unlink()  # an extraction that stopped before its marker
    releases.extract(REPO, release, tmp_path)
    assert (tree / "playbooks" / "site.yml").read_text() != "changed"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no staging directory left"


def test_a_commit_missing_from_the_clone_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ReleaseError, match="git fetch --unshallow --tags"):
        releases.extract(REPO, Release("0.0.1", "0" * 40), tmp_path)


def test_the_command_prints_the_extracted_tree_as_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    args = ["--repo", str(REPO), "extract", "--previous", "--into", str(tmp_path), "--json"]
    assert releases.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["version"] == releases.recorded(PYPROJECT)[-1].version
    assert Path(out["path"]).is_dir()
    assert releases.main(["--repo", str(tmp_path), "list"]) == 1
    assert "error: " in capsys.readouterr().err


def test_the_package_says_the_version_pyproject_names() -> None:
    import megahour

    assert megahour.__version__ == releases.current_version(PYPROJECT)
