"""TensorBoard event files of scalars, through tensorboardX: a writer and a checking reader.

tensorboardX encodes the ``Event`` protobufs and writes them as TFRecords (length, masked
CRC-32C, data, masked CRC-32C); TensorBoard's own reader reads what it writes. drlmpi adds what its
runs need around it: one new file per writer, never appended to another's (a second writer in the
same folder and second gets its own name), events buffered until ``flush_every_s`` has passed,
and a reader for the report that checks every CRC instead of skipping a damaged record.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from tensorboardX.proto.event_pb2 import Event
from tensorboardX.proto.summary_pb2 import Summary
from tensorboardX.record_writer import RecordWriter, masked_crc32c

FILE_PREFIX = "events.out.tfevents."
FILE_VERSION = "brain.Event:2"


class EventWriter:
    """Writes scalar summaries to a new event file in ``logdir`` (created if needed).

    ``add_scalars({tag: value}, step)`` queues one event holding all the values at ``step``;
    events reach the file every ``flush_every_s`` seconds (checked when one is added), at
    :meth:`flush` and at :meth:`close`. Values that are not finite are written as they are
    (TensorBoard shows NaN and inf); callers leave out what they do not have.
    """

    def __init__(self, logdir: str | Path, flush_every_s: float = 10.0) -> None:
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.flush_every_s = float(flush_every_s)
        base = self.logdir / f"{FILE_PREFIX}{int(time.time())}.{socket.gethostname()}"
        path, suffix = base, 0
        while True:  # claim a name of our own: never append to another writer's file
            try:
                path.open("xb").close()
                break
            except FileExistsError:
                suffix += 1
                path = base.with_name(f"{base.name}.{os.getpid()}.{suffix}")
        self.path = path
        self._records = RecordWriter(str(path))
        self._closed = False
        self._pending: list[Event] = []
        self._last_flush = time.monotonic()
        self._pending.append(Event(wall_time=time.time(), file_version=FILE_VERSION))
        self.flush()

    @property
    def closed(self) -> bool:
        return self._closed

    def add_scalars(self, scalars: Mapping[str, float], step: int,
                    wall_time: float | None = None) -> None:
        """Queue one event with every ``tag -> value`` of ``scalars`` at ``step``."""
        if self._closed:
            raise ValueError(f"{self.path} is closed")
        if not scalars:
            return
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=float(value))
                                 for tag, value in scalars.items()])
        self._pending.append(Event(wall_time=time.time() if wall_time is None else wall_time,
                                   step=int(step), summary=summary))
        if time.monotonic() - self._last_flush >= self.flush_every_s:
            self.flush()

    def add_scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        """Queue one scalar."""
        self.add_scalars({tag: value}, step, wall_time)

    def flush(self) -> None:
        """Write the queued events to disk."""
        self._last_flush = time.monotonic()
        if self._pending and not self._closed:
            for event in self._pending:
                self._records.write(event.SerializeToString())
            self._records.flush()
            self._pending.clear()

    def close(self) -> None:
        """Flush and close the file (closing twice is harmless)."""
        if not self._closed:
            self.flush()
            self._records.close()
            self._closed = True

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
        start, stop = pos + 12, pos + 12 + length
        if stop + 4 > end:
            raise EventFileError(f"{name}: truncated record at byte {pos}")
        payload = data[start:stop]
        (crc,) = struct.unpack("<I", data[stop : stop + 4])
        if crc != masked_crc32c(payload):
            raise EventFileError(f"{name}: data CRC mismatch at byte {pos}")
        yield payload
        pos = stop + 4


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
        for record in iter_records(file.read_bytes(), str(file)):
            try:
                event = Event.FromString(record)
            except Exception as exc:  # noqa: BLE001 (protobuf's DecodeError and friends)
                raise EventFileError(f"{file}: undecodable event ({exc})") from exc
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    out.setdefault(value.tag, []).append((event.step, event.wall_time, value.simple_value))
    return out
