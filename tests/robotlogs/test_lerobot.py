"""LeRobot datasets (v3.0) into raw episodes, read from a dataset LeRobot's own writer made
(tests/robotlogs/data/lerobot-v3, from make_lerobot_fixture.py; its SOURCE.md says which version)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from megahour.episodes import mcapio, schemas, video
from megahour.episodes.errors import CorruptEpisodeError, EpisodeError
from megahour.episodes.source import LocalSource
from megahour.ingest.work import check_raw
from megahour.robotlogs import lerobot
from megahour.robotlogs.formats import convert_dataset
from megahour.robotlogs.mapping import MappingError, parse_mapping
from tests.conftest import tool
from tests.robotlogs import make_lerobot_fixture as fixture

DATASET = Path(__file__).parent / "data" / "lerobot-v3"
MAPPING = {
    "cameras": {"front": "observation.images.front", "wrist": "observation.images.wrist"},
    "joint_states": "observation.state",
    "action": "action",
    "labels": {"robot": "so100-07", "site": "lab-a", "operator": "kim"},
}


def test_every_episode_converts_with_the_datasets_frames_joints_and_task(tmp_path) -> None:
    reports = convert_dataset(DATASET, tmp_path, parse_mapping(MAPPING))
    assert [r.episode_id for r in reports] == ["lerobot-v3-000000", "lerobot-v3-000001"]
    for episode, report in enumerate(reports):
        path = Path(report.output)
        assert check_raw(str(path))["messages"] == 4 * fixture.FRAMES
        with LocalSource(path) as source:
            recording = mcapio.read_recording(source)
            labels = mcapio.open_index(source).metadata[mcapio.EPISODE_METADATA]
        assert labels["task"] == "pick the cube" and labels["embodiment"] == "so100"
        times = sorted(fixture.timestamps(episode))
        assert [m.log_time for m in recording.messages["/joint_states"]] == [round(t * 1e9) for t in times]
        assert schemas.joint_names(recording.messages["/joint_states"][3].data) == fixture.JOINTS
        # frame n of each camera is the picture LeRobot's writer was given for row n (AV1 is lossy)
        order = sorted(range(fixture.FRAMES), key=lambda i: fixture.timestamps(episode)[i])
        for camera, index in (("front", 0), ("wrist", 1)):
            frames = recording.messages[f"/camera/{camera}"]
            for k in (0, 5, 11):
                jpeg = schemas.decode_payload(recording.topics[f"/camera/{camera}"].schema, frames[k].data)
                got = video.decode_jpeg(jpeg).astype(int)
                want = fixture.image(episode, order[k], index).astype(int)
                assert np.abs(got - want).mean() < 12, (camera, k)


def test_the_dropped_frame_and_the_swapped_stamps_are_reported_per_episode(tmp_path) -> None:
    first, second = convert_dataset(DATASET, tmp_path, parse_mapping(MAPPING))
    assert first.problems() == []
    problems = second.problems()
    assert len(problems) == 4  # two cameras, the joint states, the action
    assert all("1 dropped frames" in p and "1 mis-ordered stamps" in p for p in problems)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"joint_states": "observation.joints"},
            r"feature 'observation.joints' is not in the dataset \(it has action, ",
        ),
        (
            {"cameras": {"front": "observation.state"}, "joint_states": "action", "action": None},
            "camera front: feature 'observation.state' is float32, not video",
        ),
        ({"joint_names": ["a", "b"]}, "observation.state has 3 values per step, joint_names names 2"),
    ],
)
def test_a_mapping_that_does_not_fit_the_dataset_is_the_mappings_error(change, message, tmp_path) -> None:
    with pytest.raises(MappingError, match=message):
        convert_dataset(DATASET, tmp_path, parse_mapping({**MAPPING, **change}))


def test_damaged_and_unsupported_datasets_are_refused_with_the_fix(tmp_path) -> None:
    copy = tmp_path / "ds"
    shutil.copytree(DATASET, copy)
    video_file = next((copy / "videos" / "observation.images.wrist").rglob("*.mp4"))
    video_file.write_bytes(video_file.read_bytes()[:1500])  # cut short: frames are missing
    with pytest.raises(CorruptEpisodeError, match=r"observation.images.wrist|does not decode"):
        convert_dataset(copy, tmp_path / "out", parse_mapping(MAPPING))
    info = json.loads((copy / "meta" / "info.json").read_text())
    (copy / "meta" / "info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    with pytest.raises(EpisodeError, match=r"format v2.1, megahour reads v3.0 .*convert_dataset_v21_to_v30"):
        lerobot.list_episodes(copy)


def test_the_cli_converts_a_dataset_folder(tmp_path, run) -> None:
    mapping = tmp_path / "so100.yaml"
    mapping.write_text(yaml.safe_dump(MAPPING))
    done = run(
        [
            tool("megahour"),
            "robotlogs",
            "convert",
            str(DATASET),
            str(tmp_path / "out"),
            "--mapping",
            str(mapping),
            "--episode-id",
            "so100-run",
            "--json",
        ]
    )
    assert done.returncode == 0, done.stderr
    episodes = json.loads(done.stdout)["episodes"]
    assert [e["episode_id"] for e in episodes] == ["so100-run-000000", "so100-run-000001"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "so100-run-000000.mcap",
        "so100-run-000001.mcap",
    ]
    assert "warning:" in done.stderr and "mis-ordered" in done.stderr


def test_the_cli_refuses_a_plain_folder_and_a_bad_label_in_one_line(tmp_path, run) -> None:
    mapping = tmp_path / "so100.yaml"
    mapping.write_text(yaml.safe_dump(MAPPING))
    for source, extra, words in [
        (tmp_path, [], "is a folder without meta/info.json"),
        (DATASET, ["--label", "task"], "--label 'task' is not KEY=VALUE"),
    ]:
        done = run(
            [
                tool("megahour"),
                "robotlogs",
                "convert",
                str(source),
                str(tmp_path / "o"),
                "--mapping",
                str(mapping),
                *extra,
            ]
        )
        assert done.returncode == 1 and done.stderr.count("\n") == 1 and words in done.stderr, done.stderr


# --- export: a manifest's episodes as a LeRobot dataset ---------------------------------------------


@pytest.fixture(scope="module")
def tuned_episodes(tmp_path_factory):
    """The fixture dataset's two episodes, converted and transcoded as ingestion stores them."""
    from megahour.episodes.transcode import transcode

    work = tmp_path_factory.mktemp("tuned")
    out = []
    for report in convert_dataset(DATASET, work / "raw", parse_mapping(MAPPING)):
        tuned = work / f"{report.episode_id}.mcap"
        transcode(report.output, tuned)
        out.append(tuned)
    return out


def write_manifest(path: Path, episodes: list[Path]) -> Path:
    import pyarrow as pa

    from megahour.curation import manifest

    ids = [p.stem for p in episodes]
    table = pa.table(
        {
            "episode_id": ids + ids[:1],  # a manifest may sample an episode twice
            "storage_uri": [p.as_uri() for p in episodes] + [episodes[0].as_uri()],
            "task": ["pick the cube"] * (len(ids) + 1),
        }
    )
    manifest.write_manifest(table, path, world_size=1, query="test", warehouse="none", warehouse_version="0")
    return path


def test_a_manifests_episodes_export_as_a_lerobot_dataset_that_reads_back(
    tuned_episodes, tmp_path, run
) -> None:
    import pyarrow.parquet as pq

    manifest = write_manifest(tmp_path / "m.arrow", tuned_episodes)
    done = run(
        [
            tool("megahour"),
            "robotlogs",
            "export",
            "--manifest",
            str(manifest),
            str(tmp_path / "ds"),
            "--robot-type",
            "so100",
            "--json",
        ]
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["episodes"], report["frames"], report["fps"]) == (2, 2 * fixture.FRAMES, fixture.FPS)
    assert report["cameras"] == ["observation.images.front", "observation.images.wrist"]
    modes = {p.stat().st_mode & 0o777 for p in (tmp_path / "ds").rglob("*")}
    assert (tmp_path / "ds").stat().st_mode & 0o777 == 0o755 and modes == {0o755, 0o644}
    info = json.loads((tmp_path / "ds" / "meta" / "info.json").read_text())
    # the same layout LeRobot's writer made for the fixture: keys, features and paths
    original = json.loads((DATASET / "meta" / "info.json").read_text())
    assert set(info) == set(original) and set(info["features"]) == set(original["features"])
    assert info["data_path"] == original["data_path"] and info["video_path"] == original["video_path"]
    data = pq.read_table(tmp_path / "ds" / "data" / "chunk-000" / "file-000.parquet")
    theirs = pq.read_table(DATASET / "data" / "chunk-000" / "file-000.parquet")
    assert data.schema.remove_metadata() == theirs.schema.remove_metadata()
    # read back by megahour's LeRobot reader: frames, joints and the task of each episode
    for episode in (0, 1):
        streams = lerobot.read_streams(tmp_path / "ds", parse_mapping(MAPPING), episode)
        assert [len(streams.cameras[c]) for c in ("front", "wrist")] == [fixture.FRAMES] * 2
        assert streams.labels == {"task": "pick the cube", "embodiment": "so100"}
        order = sorted(range(fixture.FRAMES), key=lambda i: fixture.timestamps(episode)[i])
        got = video.decode_jpeg(streams.cameras["wrist"][6].jpeg).astype(int)
        assert np.abs(got - fixture.image(episode, order[6], 1).astype(int)).mean() < 14
        state = np.asarray(streams.joints["/joint_states"][6].position)
        t = sorted(fixture.timestamps(episode))[6]
        assert np.allclose(state, [np.sin(t + k) for k in range(3)], atol=1e-5)


def test_an_export_refuses_an_existing_folder_and_leaves_nothing_when_it_fails(
    tuned_episodes, tmp_path
) -> None:
    from megahour.robotlogs.lerobot_export import ExportEpisode, export

    (tmp_path / "taken").mkdir()
    with pytest.raises(EpisodeError, match="taken: exists"):
        export([ExportEpisode(str(tuned_episodes[0]), "a", "t")], tmp_path / "taken")
    with pytest.raises(EpisodeError):
        export(
            [
                ExportEpisode(str(tuned_episodes[0]), "a", "t"),
                ExportEpisode(str(tmp_path / "none.mcap"), "b", "t"),
            ],
            tmp_path / "half",
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


@pytest.mark.parametrize("template", ["../../elsewhere/file-{file_index:03d}.parquet", "/etc/{chunk_index}"])
def test_a_data_path_that_leads_out_of_the_dataset_is_refused(tmp_path, template) -> None:
    dataset = tmp_path / "ds"
    shutil.copytree(DATASET, dataset)
    info_path = dataset / "meta" / "info.json"
    info_path.write_text(json.dumps({**json.loads(info_path.read_text()), "data_path": template}))
    with pytest.raises(CorruptEpisodeError, match=r"data_path .* leads out of the dataset's folder"):
        lerobot.episode_files(dataset, 0)
