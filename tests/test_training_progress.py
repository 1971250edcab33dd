"""The training progress line (step, tokens/s, ETA) and the metrics read back from the files
that `MetricWriter` writes: TensorBoard's event records and metrics.jsonl.

The event file is parsed here from its record format (length, masked CRC-32C of the length,
the serialised `Event`, masked CRC of the data), independently of tensorboardX's writer.
"""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path

import pytest
from tensorboardX.crc32c import crc32c
from tensorboardX.proto import event_pb2

from transformer_jax.training import metrics

LINE = re.compile(
    r"step (?P<step>\d+)/(?P<total>\d+) \((?P<pct>\d+)%\) \| loss (?P<loss>[\d.]+) \| "
    r"nll (?P<nll>[\d.]+) \| (?P<sps>[\d.]+) steps/s \| (?P<tps>[\d,]+) tok/s \| "
    r"ETA (?P<eta>\S+)$"
)


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _hms(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _parse(line: str) -> dict[str, str]:
    match = LINE.match(line)
    assert match, f"progress line has changed its format: {line!r}"
    return match.groupdict()


def test_progress_line_rates_and_eta(monkeypatch):
    clock = FakeClock(100.0)
    monkeypatch.setattr(metrics.time, "perf_counter", clock)
    total, start = 20_000, 100
    progress = metrics.Progress(total, start)

    # 50 steps and 5,000 tokens in 10 s since the start.
    clock.now = 110.0
    line = _parse(progress.line(150, {"tokens": 5000.0, "loss": 2.5, "nll": 2.25}))
    assert (line["step"], line["total"], line["pct"]) == ("150", str(total), "1")
    assert (float(line["loss"]), float(line["nll"])) == (2.5, 2.25)
    assert float(line["sps"]) == pytest.approx(50 / 10) and line["tps"] == "500"
    assert line["eta"] == _hms((total - 150) / (50 / 10))  # 3,970 s: "1:06:10"
    assert (progress.steps_per_sec, progress.tokens_per_sec) == (5.0, 500.0)

    # The rates are of the last interval (100 steps, 36,000 tokens in 8 s); the ETA uses the
    # mean rate since the run (re)started (150 steps in 18 s), so it does not jump around.
    clock.now = 118.0
    line = _parse(progress.line(250, {"tokens": 36_000.0, "loss": 2.0, "nll": 1.9}))
    assert float(line["sps"]) == pytest.approx(100 / 8) and line["tps"] == "4,500"
    assert line["eta"] == _hms((total - 250) / (150 / 18))  # 2,370 s: "0:39:30"
    assert line["pct"] == str(round(100 * 250 / total))


def test_progress_eta_is_unknown_before_any_step(monkeypatch):
    clock = FakeClock(5.0)
    monkeypatch.setattr(metrics.time, "perf_counter", clock)
    progress = metrics.Progress(1000, 400)  # a resumed run: its clock starts at step 400
    clock.now = 6.0
    line = _parse(progress.line(400, {"tokens": 0.0, "loss": 1.0, "nll": 1.0}))
    assert line["eta"] == "?" and line["pct"] == "40"


def _read_records(path: Path) -> list[bytes]:
    """The records of a TFRecord file, each CRC checked as TensorBoard's reader does."""

    def masked(data: bytes) -> int:
        crc = crc32c(data) & 0xFFFFFFFF
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    blob, records, i = path.read_bytes(), [], 0
    while i < len(blob):
        header = blob[i : i + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", blob[i + 8 : i + 12])
        data = blob[i + 12 : i + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[i + 12 + length : i + 16 + length])
        assert header_crc == masked(header) and data_crc == masked(data), "corrupt record"
        records.append(data)
        i += 16 + length
    return records


def _events(workdir: Path) -> list[event_pb2.Event]:
    files = sorted((workdir / "tensorboard").glob("events.out.tfevents.*"))
    assert files, f"no event file under {workdir / 'tensorboard'}"
    return [event_pb2.Event.FromString(r) for f in files for r in _read_records(f)]


def _scalars(events: list[event_pb2.Event]) -> dict[tuple[str, int], float]:
    return {
        (value.tag, event.step): value.simple_value
        for event in events
        if event.HasField("summary")
        for value in event.summary.value
    }


def test_metric_writer_values_read_back_from_tensorboard_and_jsonl(tmp_path):
    writer = metrics.MetricWriter(tmp_path)
    writer.write(50, "train", {"loss": 3.25, "tokens_per_sec": 1234.5})
    writer.write(100, "train", {"loss": 2.75, "tokens_per_sec": 2000.0})
    writer.write(100, "eval", {"nll": 2.5, "bleu": 12.125, "accuracy": float("nan")})
    writer.close()

    scalars = _scalars(_events(tmp_path))
    assert {k: v for k, v in scalars.items() if not math.isnan(v)} == {
        ("train/loss", 50): 3.25,
        ("train/tokens_per_sec", 50): 1234.5,
        ("train/loss", 100): 2.75,
        ("train/tokens_per_sec", 100): 2000.0,
        ("eval/nll", 100): 2.5,
        ("eval/bleu", 100): 12.125,
    }
    assert math.isnan(scalars[("eval/accuracy", 100)])  # TensorBoard shows a NaN as NaN

    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["split"]) for r in records] == [
        (50, "train"),
        (100, "train"),
        (100, "eval"),
    ]
    assert records[0]["loss"] == 3.25 and records[0]["tokens_per_sec"] == 1234.5
    assert records[2]["bleu"] == 12.125 and records[2]["accuracy"] is None  # JSON has no NaN
    assert all(isinstance(r["time"], float) for r in records)


def test_metric_writer_resumed_run_hides_the_killed_runs_later_steps(tmp_path):
    writer = metrics.MetricWriter(tmp_path)
    writer.write(100, "train", {"loss": 2.0})
    writer.close()
    resumed = metrics.MetricWriter(tmp_path, purge_step=60)
    resumed.write(60, "train", {"loss": 2.5})
    resumed.close()
    events = _events(tmp_path)
    # TensorBoard drops every earlier event at a step >= 60 when it reads a START at 60.
    starts = [e.step for e in events if e.session_log.status == event_pb2.SessionLog.START]
    assert starts == [60]
    assert _scalars(events)[("train/loss", 60)] == 2.5


def test_metric_writer_disabled_writes_nothing(tmp_path):
    writer = metrics.MetricWriter(tmp_path, enabled=False)
    writer.write(1, "train", {"loss": 1.0})
    writer.write_text(1, "samples", "text")
    writer.close()
    assert list(tmp_path.iterdir()) == []
