"""``megahour episodes doctor``: prove on this node that the episode stack works end to end.

It checks PyAV's codecs, then writes a small synthetic raw episode, transcodes it, reads samples back
through the reader and compares the frames with their sources. A node whose PyAV lacks libx264, or
whose install is broken, fails here with the reason instead of in the middle of an ingestion run.
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from megahour.episodes import layout, mcapio, quality
from megahour.episodes.reader import EpisodeReader
from megahour.episodes.synthetic import synthetic_recording
from megahour.episodes.transcode import transcode

REQUIRED_CODECS = {"libx264": "w", "h264": "r"}
# The synthetic frames are tiny and noisy, so even right frames score ~29 dB; a frame from the wrong time
# scores ~10 dB (its jumping bar is elsewhere). 25 dB separates the two.
MIN_PSNR_DB = 25.0


@dataclass
class DoctorReport:
    ok: bool = True
    problems: list[str] = field(default_factory=list)
    codecs: dict[str, bool] = field(default_factory=dict)
    payload_reduction: float = 0.0
    fetches_per_sample: float = 0.0
    groups_per_sample: int = 0
    psnr_db: float = 0.0

    def fail(self, problem: str) -> None:
        self.ok = False
        self.problems.append(problem)

    def to_dict(self) -> dict:
        return asdict(self)


def run_doctor(workdir: str | Path | None = None) -> DoctorReport:
    import av

    report = DoctorReport()
    for codec, mode in REQUIRED_CODECS.items():
        try:
            av.CodecContext.create(codec, mode)
            report.codecs[codec] = True
        except (ValueError, av.FFmpegError):
            report.codecs[codec] = False
            report.fail(
                f"PyAV has no {codec} ({'encoder' if mode == 'w' else 'decoder'}); install the av wheel"
            )
    if not report.ok:
        return report
    with tempfile.TemporaryDirectory(prefix="megahour-doctor-", dir=workdir) as tmp:
        raw, tuned = Path(tmp) / "raw.mcap", Path(tmp) / "tuned.mcap"
        recording, sources = synthetic_recording(5.0)
        mcapio.write_raw(recording, raw, chunk_bytes=64 * 1024)
        result = transcode(raw, tuned)
        report.payload_reduction = result.payload_reduction
        spec = layout.sample_spec("vla")
        with EpisodeReader(tuned) as reader:
            before, after = spec.reach_ns({t: 30.0 for w in spec.frames for t in w.topics})
            lo, hi = reader.start_ns + before, reader.end_ns - after
            fetches, psnrs = [], []
            for k in range(5):
                t = lo + (hi - lo) * k // 4
                sample = reader.read_sample(spec, t)
                fetches.append(sample.stats.fetches)
                for topic, frames in sample.frames.items():
                    start = recording.start_ns
                    index = [round((int(ts) - start) * 30 / 1e9) for ts in sample.frame_times[topic]]
                    psnrs.append(quality.mean_quality(sources[topic][index], frames)[0])
            report.groups_per_sample = len({reader.group_of[topic] for topic in spec.topics()})
    report.fetches_per_sample = sum(fetches) / len(fetches)
    report.psnr_db = min(psnrs)
    if report.fetches_per_sample != report.groups_per_sample:
        report.fail(f"{report.fetches_per_sample} fetches per sample, expected {report.groups_per_sample}")
    if report.psnr_db < MIN_PSNR_DB:
        report.fail(f"decoded frames reach only {report.psnr_db:.1f} dB PSNR against their source")
    if report.payload_reduction < 0.5:
        report.fail(f"H.264 saved only {report.payload_reduction:.0%} over JPEG")
    return report
