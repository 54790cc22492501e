"""TensorBoard event files of scalars: a writer over tensorboardX's ``SummaryWriter`` and a
checking reader.

tensorboardX's ``SummaryWriter`` names, encodes and writes the files (TFRecords of ``Event``
protobufs, read by TensorBoard's own reader); its writer thread takes the events off a queue and
flushes the file every ``flush_every_s`` seconds and at :meth:`EventWriter.close`. drlmpi adds
what its runs need around it: one new file per writer, never another writer's (tensorboardX
names a file by the second and host and truncates one of that name, so a second writer in the
same folder and second gets a suffix of its own), and a reader for the report that checks every
CRC instead of skipping a damaged record (neither tensorboardX nor drlmpi's dependencies have a
public reader: TensorBoard's is in the ``tensorboard`` package, a test dependency only).
"""

from __future__ import annotations

import itertools
import os
import socket
import struct
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from tensorboardX import SummaryWriter
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import masked_crc32c

FILE_PREFIX = "events.out.tfevents."
#: events waiting for tensorboardX's writer thread before an add waits for it (a metrics flush
#: adds a few dozen, one per scalar)
QUEUE_EVENTS = 1000


def own_suffix(logdir: Path) -> str:
    """A file-name suffix that no event file of this host has in ``logdir`` for this second or
    the next: ``""`` or, where one has, ``.<pid>.<n>``."""
    now, host = int(time.time()), socket.gethostname()
    names = {p.name for p in logdir.iterdir()}
    suffix = ""
    for n in itertools.count():
        if all(f"{FILE_PREFIX}{s}.{host}{suffix}" not in names for s in (now, now + 1)):
            return suffix
        suffix = f".{os.getpid()}.{n}"
    raise AssertionError("unreachable")


class EventWriter:
    """Writes scalars to a new event file in ``logdir`` (created if needed) through
    tensorboardX's ``SummaryWriter``.

    ``add_scalars({tag: value}, step)`` adds every value at ``step`` (one ``add_scalar`` each,
    one wall time); tensorboardX's writer thread writes them and flushes the file every
    ``flush_every_s`` seconds, :meth:`flush` flushes what it has written, and :meth:`close`
    writes and flushes everything. The file version record is on disk at once. Values that are
    not finite are written as they are (TensorBoard shows NaN and inf); callers leave out what
    they do not have.
    """

    def __init__(self, logdir: str | Path, flush_every_s: float = 10.0) -> None:
        self.logdir = Path(logdir)
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.flush_every_s = float(flush_every_s)
        self._writer = SummaryWriter(str(self.logdir), max_queue=QUEUE_EVENTS,
                                     flush_secs=self.flush_every_s,
                                     filename_suffix=own_suffix(self.logdir))
        self._closed = False
        self._writer.flush()

    @property
    def closed(self) -> bool:
        return self._closed

    def add_scalars(self, scalars: Mapping[str, float], step: int,
                    wall_time: float | None = None) -> None:
        """Add every ``tag -> value`` of ``scalars`` at ``step``."""
        if self._closed:
            raise ValueError(f"the event writer of {self.logdir} is closed")
        wall_time = time.time() if wall_time is None else wall_time
        for tag, value in scalars.items():
            self._writer.add_scalar(tag, float(value), int(step), walltime=wall_time)

    def add_scalar(self, tag: str, value: float, step: int, wall_time: float | None = None) -> None:
        """Add one scalar."""
        self.add_scalars({tag: value}, step, wall_time)

    def flush(self) -> None:
        """Flush what tensorboardX's writer thread has written."""
        if not self._closed:
            self._writer.flush()

    def close(self) -> None:
        """Write every event added, flush and close the file (closing twice is harmless)."""
        if not self._closed:
            self._writer.close()
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
