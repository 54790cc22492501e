"""TensorBoard event files: the format (CRC-32C, framing, Event encoding), the learner rank's
``tb/`` output in real runs, its config options and the report's training-metric plots."""

from __future__ import annotations

import struct
import time

import numpy as np
import pytest
from omegaconf import OmegaConf

from drlmpi.algos.dqn import DQN
from drlmpi.tensorboard import (
    FILE_PREFIX,
    FILE_VERSION,
    EventFileError,
    EventWriter,
    crc32c,
    decode_event,
    encode_event,
    frame_record,
    iter_records,
    masked_crc32c,
    read_scalars,
)
from tests.conftest import CONF


# -- the format -------------------------------------------------------------------------------
def test_crc32c_check_value_and_masking():
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    # RFC 3720 (iSCSI) test vectors
    assert crc32c(bytes(32)) == 0x8A9136AA
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    assert crc32c(bytes(range(32))) == 0x46DD794E
    assert crc32c(b"") == 0
    assert crc32c(b"56789", crc32c(b"1234")) == crc32c(b"123456789")  # continuable
    # masked = rotate right by 15, plus 0xa282ead8, mod 2**32
    rotated = ((0xE3069283 >> 15) | (0xE3069283 << 17)) & 0xFFFFFFFF
    assert masked_crc32c(b"123456789") == (rotated + 0xA282EAD8) & 0xFFFFFFFF
    assert masked_crc32c(b"123456789") == 0xC78AB0E5


def test_event_encoding_is_byte_exact():
    # the file header: wall_time (field 1, fixed64 double), file_version (field 3, string)
    assert encode_event(0.0, file_version=FILE_VERSION) == (
        b"\x09" + bytes(8) + b"\x1a\x0d" + b"brain.Event:2")
    # a scalar: step (field 2, varint), summary (field 5) { value (1) { tag (1), simple_value (2) } }
    event = encode_event(1.5, step=300, scalars={"a": 1.0})
    value = b"\x0a\x01a" + b"\x15" + struct.pack("<f", 1.0)
    assert event == (b"\x09" + struct.pack("<d", 1.5) + b"\x10\xac\x02"
                     + b"\x2a" + bytes([len(value) + 2]) + b"\x0a" + bytes([len(value)]) + value)
    assert decode_event(event) == (1.5, 300, None, {"a": 1.0})
    # framing: length, masked CRC of the length, data, masked CRC of the data
    record = frame_record(b"xyz")
    assert record[:8] == struct.pack("<Q", 3) and record[12:15] == b"xyz"
    assert struct.unpack("<I", record[8:12])[0] == masked_crc32c(struct.pack("<Q", 3))
    assert struct.unpack("<I", record[15:])[0] == masked_crc32c(b"xyz")


def test_writer_reader_round_trip(tmp_path):
    writer = EventWriter(tmp_path / "tb")
    assert writer.path.name.startswith(FILE_PREFIX)
    steps = [0, 1, 1000, 2**40]
    for i, step in enumerate(steps):
        writer.add_scalars({"train/loss": 0.5 * i, "episode/return/rank3": -200.25 + i}, step,
                           wall_time=1000.0 + i)
    writer.add_scalar("eval/return", float("nan"), 7)
    writer.close()
    writer.close()  # harmless
    with pytest.raises(ValueError, match="closed"):
        writer.add_scalar("x", 1.0, 0)
    scalars = read_scalars(tmp_path / "tb")
    assert set(scalars) == {"train/loss", "episode/return/rank3", "eval/return"}
    assert scalars["train/loss"] == [(s, 1000.0 + i, 0.5 * i) for i, s in enumerate(steps)]
    assert [v for _, _, v in scalars["episode/return/rank3"]] == [-200.25, -199.25, -198.25, -197.25]
    assert np.isnan(scalars["eval/return"][0][2])
    # the first record is the file version, alone
    first = next(iter_records(writer.path.read_bytes()))
    assert decode_event(first)[2] == FILE_VERSION
    # a second writer in the same folder (same second) gets its own file; the reader reads both
    other = EventWriter(tmp_path / "tb")
    other.add_scalar("train/loss", 9.0, 5000)
    other.close()
    assert other.path != writer.path
    assert len(read_scalars(tmp_path / "tb")["train/loss"]) == len(steps) + 1


def test_writes_are_buffered_until_the_flush_interval(tmp_path):
    writer = EventWriter(tmp_path, flush_every_s=3600)
    header = writer.path.stat().st_size
    assert header > 0  # the version record is on disk at once
    writer.add_scalar("a", 1.0, 1)
    assert writer.path.stat().st_size == header
    writer.flush()
    assert writer.path.stat().st_size > header
    writer.flush_every_s = 0.0
    writer.add_scalar("a", 2.0, 2)  # due: written at once
    assert [v for _, _, v in read_scalars(writer.path)["a"]] == [1.0, 2.0]
    writer.close()


def test_a_corrupted_or_truncated_record_is_detected(tmp_path):
    with EventWriter(tmp_path) as writer:
        writer.add_scalars({"train/loss": 1.0, "train/q_mean": 2.0}, 10)
    data = writer.path.read_bytes()
    assert read_scalars(writer.path)["train/loss"] == [(10, pytest.approx(time.time(), abs=60), 1.0)]
    for position, what in ((len(data) - 10, "data CRC"), (len(data) - 1, "data CRC"), (0, "length CRC")):
        broken = bytearray(data)
        broken[position] ^= 0x01
        writer.path.write_bytes(bytes(broken))
        with pytest.raises(EventFileError, match=what):
            read_scalars(writer.path)
    writer.path.write_bytes(data[:-3])
    with pytest.raises(EventFileError, match="truncated"):
        read_scalars(writer.path)


def test_the_real_tensorboard_reads_our_files(tmp_path):
    """Cross-check with TensorBoard's own reader (skipped where tensorboard is not installed)."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with EventWriter(tmp_path) as writer:
        for step in range(1, 6):
            writer.add_scalars({"train/loss": 1.0 / step, "episode/return/rank1": 10.0 * step}, step * 100)
    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"train/loss", "episode/return/rank1"}
    events = acc.Scalars("train/loss")
    assert [e.step for e in events] == [100, 200, 300, 400, 500]
    assert [e.value for e in events] == pytest.approx([1.0 / s for s in range(1, 6)])


# -- update metrics ---------------------------------------------------------------------------
def _algo_cfg(name, spec, **overrides):
    cfg = OmegaConf.load(CONF / "algo" / f"{name}.yaml")
    for key, value in overrides.items():
        cfg[key] = value
    return spec, cfg


def test_dqn_without_clipping_has_no_grad_norm(cartpole):
    spec, cfg = _algo_cfg("dqn", cartpole, hidden=[8], max_grad_norm=None)
    assert DQN(spec, cfg).metric_names == ("loss", "q_mean")
    assert DQN(*_algo_cfg("dqn", cartpole, hidden=[8])).metric_names == ("loss", "q_mean", "grad_norm")
