"""`megahour warehouse|manifest ...`: text output is printed as written (SQL has brackets), errors are one
line."""

from __future__ import annotations

import json

from megahour.cli import main
from megahour.curation import manifest

QUERY = "SELECT episode_id FROM megahour.episodes FINAL WHERE hasAny(tags, ['[bold]pick', 'place[/]'])"


class _Source:
    def close(self) -> None:
        pass


def test_manifest_inspect_prints_the_query_as_written(monkeypatch, capsys, tmp_path) -> None:
    info = manifest.ManifestInfo(
        "megahour-manifest/2",
        3,
        1,
        [3],
        ["episode_id"],
        "ab" * 32,
        QUERY,
        "chdb:/x",
        "24.1",
        {},
        "2026-01-01",
    )
    monkeypatch.setattr(manifest, "open_file", lambda _path: (_Source(), None, info))
    assert main(["manifest", "inspect", str(tmp_path / "m.arrow")]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().endswith(QUERY)
    assert main(["manifest", "inspect", str(tmp_path / "m.arrow"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["query"] == QUERY


def test_records_that_are_not_json_are_one_line_naming_the_line(tmp_path, capsys) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text("[not json\n")
    assert main(["warehouse", "upsert", str(records)]) == 1
    assert (
        capsys.readouterr().err
        == f"error: {records}:1: not JSON (Expecting value); write one JSON object per line\n"
    )
