"""The wire formats: :class:`Tag` names the point-to-point message tags, and the ``IntEnum``
formats below (:class:`Control`, :class:`RoundCounts`, :class:`ChunkHeader`,
:class:`WeightsHeader`, :class:`CreditMessage`) name the fields of every small integer message
and header, so code reads ``control[Control.STOP]``, never ``control[0]``;
:class:`PackedMessage` is a header and a float32 payload in one buffer.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np


class Tag(IntEnum):
    """Point-to-point message tags (one per message kind, so a stray message never matches)."""

    EXPERIENCE = 12
    WEIGHTS = 21
    CONTROL = 22
    EVALUATION = 23  # a simulator's share of an evaluation's returns (run.eval_on=simulators)
    DONE = 41
    #: central inference: a simulator's environment group g sends ``OBSERVATIONS + g`` and
    #: receives ``ACTIONS + g`` (drlmpi.topologies.central; at most 8 groups)
    OBSERVATIONS = 50
    ACTIONS = 60


# -- wire formats: the fields of int64 messages and headers ------------------------------------
class Control(IntEnum):
    """The learner's round message to simulators / workers (int64, ``Tag.CONTROL`` or ``Bcast``).

    ``N_UPDATES`` is the number of updates every worker runs this round (parameter server);
    0 elsewhere. ``CHECKPOINT``: every rank holding learning state saves its part of a
    checkpoint at the end of this round (collective topologies; see drlmpi.outputs.checkpoint).
    ``EVALUATE``: 0, or 1 + the index of the evaluation the simulators play with the weights
    that follow (``run.eval_on=simulators``, drlmpi.topologies.core.rounds); 0 is "none" so that every
    zeroed message asks for nothing.
    """

    STOP = 0
    ENV_STEPS = 1  # job-wide environment steps so far (drives exploration schedules)
    UPDATES = 2  # learner updates so far
    N_UPDATES = 3
    CHECKPOINT = 4
    EVALUATE = 5


class RoundCounts(IntEnum):
    """One row per rank of a data-parallel round's ``Allgather`` (int64)."""

    NEW_STEPS = 0  # environment steps this rank collected this round
    UPDATES_DUE = 1  # updates this rank's stored data entitles (all ranks run the minimum)
    EPISODES = 2  # episodes this rank finished this round


class ChunkHeader(IntEnum):
    """Header of an asynchronous experience chunk (int64, before the float32 rows)."""

    POLICY_VERSION = 0  # learner updates of the weights that acted
    ROWS = 1  # valid rows in the fixed-size payload
    SEQUENCE = 2  # chunks this simulator sent before this one
    SIMULATOR_STEPS = 3  # this simulator's own environment steps so far


class WeightsHeader(IntEnum):
    """Header of an asynchronous weights publication (int64, before the float32 parameters)."""

    ENV_STEPS = 0  # job-wide environment steps at publication
    VERSION = 1  # learner updates at publication (the chunk header's POLICY_VERSION)


class CreditMessage(IntEnum):
    """The asynchronous learner's control message to one simulator (int64)."""

    KIND = 0  # CREDIT or STOP below
    VALUE = 1  # CREDIT: chunks the simulator may have sent in total; STOP: weights messages sent


CREDIT, STOP = 1, 2  # CreditMessage.KIND values


def int64_message(fields: type[IntEnum], **values: int) -> np.ndarray:
    """A zeroed int64 message with one slot per field of ``fields``, ``values`` filled in by
    lower-case field name (``int64_message(Control, stop=1)``)."""
    out = np.zeros(len(fields), dtype=np.int64)
    for name, value in values.items():
        out[fields[name.upper()]] = int(value)
    return out


class PackedMessage:
    """An int64 header and a float32 payload in ONE contiguous byte buffer: one message.

    Used where a receive must be posted before the sender's counts are known (the asynchronous
    topology's pre-posted ``Irecv``): the layout is fixed, the header (named by an ``IntEnum``
    wire format) says what the payload is.
    """

    def __init__(self, header: type[IntEnum], payload_shape: tuple[int, ...]) -> None:
        header_bytes = 8 * len(header)
        payload_len = int(np.prod(payload_shape))
        self.buffer = np.zeros(header_bytes + 4 * payload_len, dtype=np.uint8)
        self.header = self.buffer[:header_bytes].view(np.int64)
        self.payload = self.buffer[header_bytes:].view(np.float32).reshape(payload_shape)
