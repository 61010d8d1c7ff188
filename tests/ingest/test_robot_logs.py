"""A landing zone of robot logs as labs record them: a ROS 2 MCAP recording, a ROS 1 bag, an ALOHA HDF5
episode (each written by its own tooling), a megahour raw episode and a corrupt file, ingested by the
same steps the DAG runs."""

from __future__ import annotations

import shutil

import pytest
import yaml

from megahour.curation import episodes_table
from megahour.ingest import quarantine, work
from megahour.ingest.config import IngestConfig
from megahour.ingest.landing import write_landing
from megahour.ingest.runfiles import RunDir
from tests.robotlogs import writers


@pytest.fixture
def mixed_landing(tmp_path, warehouse, monkeypatch):
    monkeypatch.setenv("MEGAHOUR_WAREHOUSE", warehouse.url)
    warehouse.execute("DROP DATABASE IF EXISTS megahour")
    landing = tmp_path / "landing"
    writers.write_robot_landing(landing)
    sim = write_landing(tmp_path / "sim", 2, corrupt=1, seconds=0.5, seed=11)
    for episode in sim:
        shutil.copy(episode.path, landing)
    config = IngestConfig(
        landing=str(landing),
        storage=str(tmp_path / "storage"),
        runs=str(tmp_path / "runs"),
        max_workers=2,
        worker_overhead_s=0,
    )
    yield config, sim
    warehouse.execute("DROP DATABASE IF EXISTS megahour")


def run_all(config, warehouse, run_dir, params=None):
    logs: list[str] = []
    work.execute(
        "discover", run_dir, params=params or {}, config=config, log=logs.append, warehouse=warehouse
    )
    work.execute("plan", run_dir, config=config, log=logs.append, warehouse=warehouse)
    for b in range(len(RunDir(run_dir).plan()["batches"])):
        for step in ("validate", "transcode", "upload", "register", "previews", "qc"):
            work.execute(step, run_dir, b, config=config, log=logs.append, warehouse=warehouse)
    return work.execute("summary", run_dir, config=config, log=logs.append, warehouse=warehouse), logs


def test_a_mixed_landing_zone_ingests_every_format_and_quarantines_the_corrupt_one(
    mixed_landing, warehouse, tmp_path
) -> None:
    config, sim = mixed_landing
    run_dir = tmp_path / "runs" / "r1"
    summary, logs = run_all(config, warehouse, run_dir)
    good_sim = next(e.episode_id for e in sim if not e.corrupt)
    bad_sim = next(e.episode_id for e in sim if e.corrupt)
    expected = sorted(["ros2-ep", "ros1-ep", "aloha-ep", good_sim])
    assert summary["succeeded"] and summary["registered"] == 4
    assert sorted(p.stem for p in (tmp_path / "storage" / "episodes").iterdir()) == expected
    assert episodes_table.count(warehouse) == 4
    assert list(quarantine.reasons(warehouse)) == [bad_sim]
    # the dropped frame and the mis-ordered stamp of each ROS recording are in the run's log
    assert sum("1 dropped frames" in line for line in logs) == 4  # two cameras, two ROS recordings
    assert sum("mis-ordered stamps" in line for line in logs) == 2
    validated = [
        e
        for b in range(len(RunDir(run_dir).plan()["batches"]))
        for e in RunDir(run_dir).result("validate", b)["ok"]
    ]
    formats = sorted(e["conversion"]["format"] for e in validated if "conversion" in e)
    assert formats == ["hdf5", "ros1-bag", "ros2-mcap"]
    # converted copies are staging, gone once the run succeeded
    assert not (RunDir(run_dir).staging / work.CONVERTED_DIR).exists()


def test_a_recording_without_a_mapping_fails_the_step_and_quarantines_nothing(
    mixed_landing, warehouse, tmp_path
) -> None:
    config, _ = mixed_landing
    landing = tmp_path / "landing"
    (landing / "robot.yaml").unlink()
    run_dir = tmp_path / "runs" / "r2"
    work.execute("discover", run_dir, params={"max_workers": 1}, config=config, warehouse=warehouse)
    work.execute("plan", run_dir, config=config, warehouse=warehouse)
    with pytest.raises(
        work.StepFailed, match=r"ros1-ep.bag: no robot mapping \(ros1-ep.robot.yaml or robot.yaml"
    ):
        work.execute("validate", run_dir, 0, config=config, warehouse=warehouse)
    # only the corrupt simulated episode (validated before the bag) is quarantined, no robot recording
    assert all(key.startswith("land-") for key in quarantine.reasons(warehouse))
    # the run's robot_mapping param names one file for every recording
    (landing / "aloha-ep.hdf5").unlink()
    (tmp_path / "arm.yaml").write_text(yaml.safe_dump(writers.MAPPING))
    run_dir = tmp_path / "runs" / "r3"
    params = {"max_workers": 1, "robot_mapping": str(tmp_path / "arm.yaml")}
    work.execute("discover", run_dir, params=params, config=config, warehouse=warehouse)
    work.execute("plan", run_dir, config=config, warehouse=warehouse)
    result = work.execute("validate", run_dir, 0, config=config, warehouse=warehouse)
    assert sorted(e["episode_id"] for e in result["ok"] if "conversion" in e) == ["ros1-ep", "ros2-ep"]
    assert {e["conversion"]["mapping"] for e in result["ok"] if "conversion" in e} == {
        str(tmp_path / "arm.yaml")
    }
    assert len(result["quarantined"]) == 1  # the corrupt simulated episode only


def test_with_validate_off_recordings_still_convert_and_a_failed_one_is_kept_as_recorded(
    mixed_landing, warehouse, tmp_path, monkeypatch
) -> None:
    """Transcode then reads each recording's conversion itself; a recording whose conversion fails in
    transcode is quarantined as the lab recorded it (the .bag), not as megahour's staging copy."""
    from megahour.episodes.errors import CorruptEpisodeError

    config, sim = mixed_landing
    real_transcode = work.transcode

    def failing_for_the_bag(source, out, options):
        if "ros1-ep" in str(source):
            raise CorruptEpisodeError(str(source), "a frame does not decode", fix="re-record it")
        return real_transcode(source, out, options)

    monkeypatch.setattr(work, "transcode", failing_for_the_bag)
    run_dir = tmp_path / "runs" / "no-validate"
    summary, _ = run_all(config, warehouse, run_dir, params={"steps": {"validate": False}})
    good_sim = next(e.episode_id for e in sim if not e.corrupt)
    stored = sorted(p.stem for p in (tmp_path / "storage" / "episodes").iterdir())
    assert stored == sorted(["ros2-ep", "aloha-ep", good_sim])
    assert summary["registered"] == 3
    quarantined = {row[0]: row[1] for row in _quarantine_rows(warehouse)}
    assert quarantined["ros1-ep"] == str(tmp_path / "landing" / "ros1-ep.bag")
    assert (tmp_path / "storage" / "quarantine" / "ros1-ep.bag").is_file()


def _quarantine_rows(warehouse) -> list:
    return warehouse.query_json(f"SELECT episode_id, source FROM megahour.{quarantine.TABLE} FINAL")["data"]


def test_recordings_that_share_a_name_convert_separately(tmp_path) -> None:
    """ep1.bag and ep1.h5 are two recordings: their conversions must not collide in staging."""
    landing = tmp_path / "landing"
    landing.mkdir()
    writers.write_ros1_bag(landing / "ep1.bag")
    writers.write_aloha_hdf5(landing / "ep1.hdf5", compressed=True)
    (landing / "ep1.robot.yaml").write_text(yaml.safe_dump(writers.MAPPING))
    hdf5_mapping = tmp_path / "aloha.yaml"
    hdf5_mapping.write_text(yaml.safe_dump(writers.HDF5_MAPPING))
    config = IngestConfig(landing=str(landing), storage=str(tmp_path / "s"), runs=str(tmp_path / "runs"))
    run = RunDir(tmp_path / "runs" / "r")
    bag_ctx = work.StepContext(run, config, {"robot_mapping": ""}, log=lambda _: None)
    h5_ctx = work.StepContext(run, config, {"robot_mapping": str(hdf5_mapping)}, log=lambda _: None)
    bag_out, bag_report = work.as_raw(bag_ctx, str(landing / "ep1.bag"))
    h5_out, h5_report = work.as_raw(h5_ctx, str(landing / "ep1.hdf5"))
    assert bag_out != h5_out
    assert (bag_report["format"], h5_report["format"]) == ("ros1-bag", "hdf5")
    # a retry reuses each conversion
    assert work.as_raw(bag_ctx, str(landing / "ep1.bag"))[1] == bag_report


def test_a_landing_zone_and_an_episode_store_in_buckets(mixed_landing, warehouse, tmp_path, s3) -> None:
    """Every format from a landing prefix in one bucket into an episode prefix in another, all requests
    signed: the rows' storage_uri is the object URL, and the reader reads the episodes from there."""
    from megahour.episodes import layout
    from megahour.episodes.reader import EpisodeReader
    from megahour.objectstore import store

    config, sim = mixed_landing
    landing = store.bucket(s3.make_bucket("fleet-uploads"))
    for path in sorted((tmp_path / "landing").iterdir()):
        landing.put_file(path, f"site-a/{path.name}")
    landing.put_bytes(b"not yet", "site-a/.ep-in-flight.bag")  # an upload still in flight
    s3.make_bucket("lab-episodes")
    params = {"landing": "s3://fleet-uploads/site-a", "storage": "s3://lab-episodes/v1"}
    run_dir = tmp_path / "runs" / "bucket"
    summary, _ = run_all(config, warehouse, run_dir, params=params)
    good_sim = next(e.episode_id for e in sim if not e.corrupt)
    bad_sim = next(e for e in sim if e.corrupt)
    assert summary["succeeded"] and summary["discovered"] == 5 and summary["registered"] == 4
    query = "SELECT episode_id, storage_uri FROM megahour.episodes FINAL ORDER BY episode_id"
    rows = warehouse.query_json(query)
    expected = sorted(["ros2-ep", "ros1-ep", "aloha-ep", good_sim])
    assert [r[0] for r in rows["data"]] == expected
    assert [r[1] for r in rows["data"]] == [f"s3://lab-episodes/v1/episodes/{e}.mcap" for e in expected]
    with EpisodeReader(rows["data"][0][1]) as reader:
        spec = layout.SampleSpec("high", frames=(layout.FrameWindow(("/camera/high",), 1),))
        assert reader.read_sample(spec, reader.start_ns + 200_000_000).frames["/camera/high"].size
    stored = store.bucket("lab-episodes")
    quarantined = _quarantine_rows(warehouse)
    assert quarantined == [[bad_sim.episode_id, f"s3://fleet-uploads/site-a/{bad_sim.episode_id}.mcap"]]
    reason = warehouse.query_json(f"SELECT reason FROM megahour.{quarantine.TABLE} FINAL")["data"][0][0]
    assert f"s3://fleet-uploads/site-a/{bad_sim.episode_id}.mcap" in reason and "staging" not in reason
    assert stored.head(f"v1/quarantine/{bad_sim.episode_id}.mcap").size == bad_sim.bytes
    assert stored.list("v1/previews/ros1-ep") and stored.head("v1/qc/ros1-ep.json").size > 0
    # a second run of the same landing zone registers the same rows at the same URLs
    again, _ = run_all(config, warehouse, tmp_path / "runs" / "bucket-again", params=params)
    assert again["registered"] == 4
    assert warehouse.query_json(query)["data"] == rows["data"]
    # local copies of the landed recordings are staging, gone once the run succeeded
    assert not (RunDir(run_dir).staging / work.LANDED_DIR).exists()


def test_a_lerobot_dataset_in_the_landing_zone_ingests_episode_by_episode(
    warehouse, tmp_path, monkeypatch
) -> None:
    """A LeRobot dataset folder (written by LeRobot's own writer) lands as one raw episode per dataset
    episode; a dataset whose video is damaged has its episodes quarantined where they lie."""
    from tests.robotlogs.test_lerobot import DATASET, MAPPING

    monkeypatch.setenv("MEGAHOUR_WAREHOUSE", warehouse.url)
    warehouse.execute("DROP DATABASE IF EXISTS megahour")
    landing = tmp_path / "landing"
    landing.mkdir()
    shutil.copytree(DATASET, landing / "pick_cube")
    shutil.copytree(DATASET, landing / "broken")
    video = next((landing / "broken" / "videos" / "observation.images.front").rglob("*.mp4"))
    video.write_bytes(video.read_bytes()[:1500])
    for name in ("pick_cube", "broken"):
        (landing / f"{name}.robot.yaml").write_text(yaml.safe_dump(MAPPING))
    config = IngestConfig(
        landing=str(landing),
        storage=str(tmp_path / "storage"),
        runs=str(tmp_path / "runs"),
        worker_overhead_s=0,
    )
    assert [i.url for i in work.landing_files(landing)] == [
        f"{landing}/broken#episode=0",
        f"{landing}/broken#episode=1",
        f"{landing}/pick_cube#episode=0",
        f"{landing}/pick_cube#episode=1",
    ]
    summary, logs = run_all(config, warehouse, tmp_path / "runs" / "lerobot")
    assert summary["succeeded"] and summary["registered"] == 2
    assert sorted(p.name for p in (tmp_path / "storage" / "episodes").iterdir()) == [
        "pick_cube-000000.mcap",
        "pick_cube-000001.mcap",
    ]
    rows = {row[0]: row[1] for row in _quarantine_rows(warehouse)}
    assert rows == {
        "broken-000000": f"{landing}/broken#episode=0",
        "broken-000001": f"{landing}/broken#episode=1",
    }
    assert not (tmp_path / "storage" / "quarantine").exists()  # the dataset stays where it is
    assert sum("1 dropped frames" in line for line in logs) == 4  # episode 1: two cameras, state, action
    warehouse.execute("DROP DATABASE IF EXISTS megahour")


def test_a_lerobot_dataset_in_a_bucket_ingests_fetching_only_each_episodes_files(
    warehouse, tmp_path, monkeypatch, s3
) -> None:
    """Datasets under a landing prefix in a bucket land episode by episode, each episode fetching the
    dataset's meta/ and its own files; the episodes of a damaged video are quarantined where they lie; a
    dataset still uploading (a video not there yet) and one of a format megahour does not read are left
    for a later run."""
    import json as jsonlib

    from megahour.objectstore import store
    from tests.robotlogs.test_lerobot import DATASET, MAPPING

    monkeypatch.setenv("MEGAHOUR_WAREHOUSE", warehouse.url)
    warehouse.execute("DROP DATABASE IF EXISTS megahour")
    bucket = store.bucket(s3.make_bucket("lerobot-landing"))
    for name in ("pick_cube", "broken", "old_format", "uploading"):
        for path in sorted(p for p in DATASET.rglob("*") if p.is_file()):
            relative = path.relative_to(DATASET).as_posix()
            data = path.read_bytes()
            if name == "broken" and relative.startswith("videos/observation.images.front/"):
                data = data[:1500]
            if name == "uploading" and relative.startswith("videos/observation.images.front/"):
                continue  # the upload has not reached this video yet
            if name == "old_format" and relative == "meta/info.json":
                data = jsonlib.dumps({**jsonlib.loads(data), "codebase_version": "v2.1"}).encode()
            bucket.put_bytes(data, f"site/{name}/{relative}")
        bucket.put_bytes(yaml.safe_dump(MAPPING).encode(), f"site/{name}.robot.yaml")
    s3.make_bucket("lerobot-store")
    config = IngestConfig(
        landing="s3://lerobot-landing/site",
        storage="s3://lerobot-store/v1",
        runs=str(tmp_path / "runs"),
        worker_overhead_s=0,
    )
    skipped: list[str] = []
    assert [i.url for i in work.landing_files(config.landing, skipped)] == [
        "s3://lerobot-landing/site/broken#episode=0",
        "s3://lerobot-landing/site/broken#episode=1",
        "s3://lerobot-landing/site/pick_cube#episode=0",
        "s3://lerobot-landing/site/pick_cube#episode=1",
    ]
    assert len(skipped) == 2 and skipped[0].startswith("s3://lerobot-landing/site/old_format: ")
    assert "format v2.1" in skipped[0] and "megahour-dataset-" not in skipped[0]
    assert skipped[1] == (
        "s3://lerobot-landing/site/uploading: videos/observation.images.front/chunk-000/file-000.mp4, named "
        "by its meta/, is not there yet (an upload or copy in progress); the next run takes it"
    )
    run_dir = tmp_path / "runs" / "lerobot-bucket"
    summary, _ = run_all(config, warehouse, run_dir)
    assert summary["succeeded"] and summary["registered"] == 2
    rows = warehouse.query_json(
        "SELECT episode_id, storage_uri FROM megahour.episodes FINAL ORDER BY episode_id"
    )
    assert rows["data"] == [
        [f"pick_cube-00000{i}", f"s3://lerobot-store/v1/episodes/pick_cube-00000{i}.mcap"] for i in (0, 1)
    ]
    quarantined = {row[0]: row[1] for row in _quarantine_rows(warehouse)}
    assert quarantined == {
        "broken-000000": "s3://lerobot-landing/site/broken#episode=0",
        "broken-000001": "s3://lerobot-landing/site/broken#episode=1",
    }
    reasons = warehouse.query_json(f"SELECT reason FROM megahour.{quarantine.TABLE} FINAL")["data"]
    assert len(reasons) == 2 and all(
        r[0].startswith("CorruptEpisodeError: s3://lerobot-landing/site/broken") and "images.front" in r[0]
        for r in reasons
    ), reasons
    assert not store.list_folder("s3://lerobot-store/v1/quarantine")  # the dataset stays where it is
    warehouse.execute("DROP DATABASE IF EXISTS megahour")


def test_a_dataset_episode_fetches_its_own_files_once(tmp_path, s3) -> None:
    """An episode's copy is the dataset's meta/ and the files the episode is in, kept by ETag: fetching
    it again copies nothing; a re-uploaded file is fetched again."""
    from megahour.ingest import landed
    from megahour.objectstore import store
    from tests.robotlogs.test_lerobot import DATASET

    bucket = store.bucket(s3.make_bucket("lerobot-fetch"))
    for path in sorted(p for p in DATASET.rglob("*") if p.is_file()):
        bucket.put_bytes(path.read_bytes(), f"site/ds/{path.relative_to(DATASET).as_posix()}")
    bucket.put_bytes(b"extra", "site/ds/videos/observation.images.front/chunk-001/file-000.mp4")
    local = landed.fetch_episode("s3://lerobot-fetch/site/ds#episode=1", tmp_path)
    assert local == f"{tmp_path / 'ds'}#episode=1"
    copied = sorted(
        p.relative_to(tmp_path / "ds").as_posix() for p in (tmp_path / "ds").rglob("[!.]*") if p.is_file()
    )
    assert copied == sorted(
        [p.relative_to(DATASET).as_posix() for p in (DATASET / "meta").rglob("*") if p.is_file()]
        + [
            "data/chunk-000/file-000.parquet",
            "videos/observation.images.front/chunk-000/file-000.mp4",
            "videos/observation.images.wrist/chunk-000/file-000.mp4",
        ]
    )
    data = tmp_path / "ds" / "data" / "chunk-000" / "file-000.parquet"
    data.write_bytes(b"a copy a retry must not fetch again")  # same tag: kept
    landed.fetch_episode("s3://lerobot-fetch/site/ds#episode=1", tmp_path)
    assert data.read_bytes() == b"a copy a retry must not fetch again"
    bucket.put_bytes(b"re-uploaded", "site/ds/data/chunk-000/file-000.parquet")
    landed.fetch_episode("s3://lerobot-fetch/site/ds#episode=1", tmp_path)
    assert data.read_bytes() == b"re-uploaded"


def test_a_dataset_megahour_cannot_list_is_left_for_a_later_run(tmp_path) -> None:
    import json as jsonlib

    from tests.robotlogs.test_lerobot import DATASET

    landing = tmp_path / "landing"
    shutil.copytree(DATASET, landing / "old_format")
    info = landing / "old_format" / "meta" / "info.json"
    info.write_text(jsonlib.dumps({**jsonlib.loads(info.read_text()), "codebase_version": "v2.1"}))
    writers.write_ros1_bag(landing / "ep.bag")
    config = IngestConfig(landing=str(landing), storage=str(tmp_path / "s"), runs=str(tmp_path / "runs"))
    logs: list[str] = []
    found = work.execute("discover", tmp_path / "runs" / "r", config=config, log=logs.append)
    assert [f["path"] for f in found["files"]] == [str(landing / "ep.bag")]
    assert any("skipped" in line and "format v2.1" in line for line in logs)


def test_a_mapping_in_a_bucket_that_is_missing_fails_the_step_and_a_corrected_one_is_used(
    warehouse, tmp_path, s3, monkeypatch
) -> None:
    from megahour.objectstore import store

    monkeypatch.setenv("MEGAHOUR_WAREHOUSE", warehouse.url)
    warehouse.execute("DROP DATABASE IF EXISTS megahour")
    landing = store.bucket(s3.make_bucket("mapping-landing"))
    landing.put_file(writers.write_ros1_bag(tmp_path / "ep.bag"), "site/ep.bag")
    s3.make_bucket("mapping-store")
    config = IngestConfig(
        landing="s3://mapping-landing/site", storage="s3://mapping-store/v1", runs=str(tmp_path / "runs")
    )
    run_dir = tmp_path / "runs" / "r"
    params = {"robot_mapping": "s3://mapping-landing/mappings/arm.yaml"}
    work.execute("discover", run_dir, params=params, config=config, warehouse=warehouse)
    work.execute("plan", run_dir, config=config, warehouse=warehouse)
    with pytest.raises(
        work.ConfigFailed, match=r"robot_mapping s3://mapping-landing/mappings/arm.yaml does not exist"
    ):
        work.execute("validate", run_dir, 0, config=config, warehouse=warehouse)
    wrong = {**writers.MAPPING, "joint_names": ["shoulder", "elbo"]}
    landing.put_bytes(yaml.safe_dump(wrong).encode(), "mappings/arm.yaml")
    with pytest.raises(work.ConfigFailed, match="joint elbo is not in the message"):
        work.execute("validate", run_dir, 0, config=config, warehouse=warehouse)
    landing.put_bytes(yaml.safe_dump(writers.MAPPING).encode(), "mappings/arm.yaml")  # the lab's fix
    result = work.execute("validate", run_dir, 0, config=config, warehouse=warehouse)
    assert [e["episode_id"] for e in result["ok"]] == ["ep"] and result["quarantined"] == []
    assert quarantine.reasons(warehouse) == {}
    warehouse.execute("DROP DATABASE IF EXISTS megahour")
