"""TensorBoard event files without TensorBoard: a scalar writer and a checking reader.

An event file is a sequence of TFRecords, each framing one serialized ``Event`` protobuf::

    uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes
    data (length bytes)           | uint32 masked CRC-32C of the data

with ``masked(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8`` (mod 2**32) and CRC-32C the
Castagnoli polynomial (reflected ``0x82f63b78``). The messages used here, encoded by hand::

    Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
    Summary { repeated Value value = 1; }
    Value   { string tag = 1; float simple_value = 2; }

The first record of a file carries ``file_version = "brain.Event:2"``; every later one a
``Summary`` of scalars at one step. Files are named ``events.out.tfevents.<unix time>.<host>``,
the pattern TensorBoard looks for under ``--logdir``.

:class:`EventWriter` buffers records in memory and writes them to disk every ``flush_every_s``
seconds and at :meth:`~EventWriter.flush` / :meth:`~EventWriter.close`.
:func:`read_scalars` reads a file (or every event file of a folder) back, verifying every CRC.
Nothing here imports TensorBoard, TensorFlow or protobuf.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

FILE_VERSION = "brain.Event:2"
FILE_PREFIX = "events.out.tfevents."
CRC32C_POLY = 0x82F63B78  # Castagnoli, bit-reversed
MASK_DELTA = 0xA282EAD8


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ CRC32C_POLY if crc & 1 else crc >> 1
        table.append(crc)
    return tuple(table)


_TABLE = _crc32c_table()


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``; pass a previous result as ``crc`` to continue it."""
    crc ^= 0xFFFFFFFF
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """The CRC TFRecord stores: CRC-32C rotated right by 15 bits plus ``0xa282ead8``."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


# -- protobuf encoding (the few wire types the Event message needs) --------------------------
def _varint(value: int) -> bytes:
    value &= 0xFFFFFFFFFFFFFFFF  # int64: negative values take ten bytes (two's complement)
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint((field << 3) | wire_type)


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + _varint(len(payload)) + payload


def encode_event(wall_time: float, step: int = 0, file_version: str | None = None,
                 scalars: Mapping[str, float] | None = None) -> bytes:
    """One serialized ``Event``: a file-version header or a ``Summary`` of ``tag -> value``."""
    out = _key(1, 1) + struct.pack("<d", float(wall_time))
    if step:
        out += _key(2, 0) + _varint(int(step))
    if file_version is not None:
        out += _length_delimited(3, file_version.encode())
    if scalars:
        summary = b"".join(
            _length_delimited(1, _length_delimited(1, str(tag).encode())
                              + _key(2, 5) + struct.pack("<f", float(value)))
            for tag, value in scalars.items())
        out += _length_delimited(5, summary)
    return out


def frame_record(data: bytes) -> bytes:
    """``data`` framed as one TFRecord (length, its masked CRC, data, the data's masked CRC)."""
    header = struct.pack("<Q", len(data))
    return (header + struct.pack("<I", masked_crc32c(header)) + data
            + struct.pack("<I", masked_crc32c(data)))


class EventWriter:
    """Writes scalar summaries to a new event file in ``logdir`` (created if needed).

    ``add_scalars({tag: value}, step)`` queues one record holding all the values at ``step``;
    records reach the file every ``flush_every_s`` seconds (checked when one is added), at
    :meth:`flush` and at :meth:`close`. Values that are not finite are written as they are
    (TensorBoard shows NaN and inf); callers leave out what they do not have.
    """

    def __init__(self, logdir: str | Path, flush_every_s: float = 10.0) -> None:
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.flush_every_s = float(flush_every_s)
        base = self.logdir / f"{FILE_PREFIX}{int(time.time())}.{socket.gethostname()}"
        path, suffix = base, 0
        while True:  # never append to another writer's file
            try:
                self._file = open(path, "xb")  # noqa: SIM115 (closed in close())
                break
            except FileExistsError:
                suffix += 1
                path = base.with_name(f"{base.name}.{os.getpid()}.{suffix}")
        self.path = path
        self._pending: list[bytes] = []
        self._last_flush = time.monotonic()
        self.records = 0
        self._pending.append(frame_record(encode_event(time.time(), file_version=FILE_VERSION)))
        self.flush()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def add_scalars(self, scalars: Mapping[str, float], step: int,
                    wall_time: float | None = None) -> None:
        """Queue one event with every ``tag -> value`` of ``scalars`` at ``step``."""
        if self._file.closed:
            raise ValueError(f"{self.path} is closed")
        if not scalars:
            return
        wall = time.time() if wall_time is None else wall_time
        self._pending.append(frame_record(encode_event(wall, int(step), scalars=scalars)))
        self.records += 1
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def add_scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        """Queue one scalar."""
        self.add_scalars({tag: value}, step, wall_time)

    def flush(self) -> None:
        """Write the queued records to disk."""
        self._last_flush = time.monotonic()
        if self._pending and not self._file.closed:
            self._file.write(b"".join(self._pending))
            self._file.flush()
            self._pending.clear()

    def close(self) -> None:
        """Flush and close the file (closing twice is harmless)."""
        if not self._file.closed:
            self.flush()
            self._file.close()

    def __enter__(self) -> EventWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- reading --------------------------------------------------------------------------------
class EventFileError(ValueError):
    """An event file that is corrupted (a CRC mismatch) or cut short."""


def iter_records(data: bytes, name: str = "event file") -> Iterator[bytes]:
    """The payloads of the TFRecords in ``data``, each CRC verified."""
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < 12:
            raise EventFileError(f"{name}: truncated record header at byte {pos}")
        header = data[pos : pos + 8]
        (length,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", data[pos + 8 : pos + 12])
        if crc != masked_crc32c(header):
            raise EventFileError(f"{name}: length CRC mismatch at byte {pos}")
        start = pos + 12
        if end - start < length + 4:
            raise EventFileError(f"{name}: truncated record at byte {pos}")
        payload = data[start : start + length]
        (crc,) = struct.unpack("<I", data[start + length : start + length + 4])
        if crc != masked_crc32c(payload):
            raise EventFileError(f"{name}: data CRC mismatch in the record at byte {pos}")
        yield payload
        pos = start + length + 4


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise EventFileError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise EventFileError("varint longer than 10 bytes")


def _fields(data: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """``(field number, wire type, value)`` of a protobuf message; length-delimited values as
    bytes, fixed-width ones as their raw integer."""
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _read_varint(data, pos)
            value, pos = data[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            raise EventFileError(f"unsupported protobuf wire type {wire}")
        if pos > len(data):
            raise EventFileError("truncated protobuf field")
        yield field, wire, value


def decode_event(data: bytes) -> tuple[float, int, str | None, dict[str, float]]:
    """``(wall_time, step, file_version, {tag: simple_value})`` of one serialized ``Event``
    (summary values other than ``simple_value`` are skipped)."""
    wall_time, step, version, scalars = 0.0, 0, None, {}
    for field, wire, value in _fields(data):
        if field == 1 and wire == 1:
            (wall_time,) = struct.unpack("<d", value)
        elif field == 2 and wire == 0:
            step = value - (1 << 64) if value >= 1 << 63 else value
        elif field == 3 and wire == 2:
            version = value.decode()
        elif field == 5 and wire == 2:
            for vfield, vwire, entry in _fields(value):
                if vfield != 1 or vwire != 2:
                    continue
                tag, simple = None, None
                for efield, ewire, item in _fields(entry):
                    if efield == 1 and ewire == 2:
                        tag = item.decode()
                    elif efield == 2 and ewire == 5:
                        (simple,) = struct.unpack("<f", item)
                if tag is not None and simple is not None:
                    scalars[tag] = simple
    return wall_time, step, version, scalars


def event_files(path: str | Path) -> list[Path]:
    """The event files of a folder (sorted by name, i.e. by creation time), or ``[path]``."""
    path = Path(path)
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and p.name.startswith(FILE_PREFIX))
    return [path]


def read_scalars(path: str | Path) -> dict[str, list[tuple[int, float, float]]]:
    """Every scalar in an event file, or in all event files of a folder:
    ``{tag: [(step, wall_time, value), ...]}`` in file order. Raises :class:`EventFileError`
    on a CRC mismatch or a file cut short, ``OSError`` when a file cannot be read."""
    out: dict[str, list[tuple[int, float, float]]] = {}
    for file in event_files(path):
        data = file.read_bytes()
        for record in iter_records(data, str(file)):
            try:
                wall_time, step, _, scalars = decode_event(record)
            except (EventFileError, struct.error, UnicodeDecodeError) as exc:
                raise EventFileError(f"{file}: undecodable event ({exc})") from exc
            for tag, value in scalars.items():
                out.setdefault(tag, []).append((step, wall_time, value))
    return out
