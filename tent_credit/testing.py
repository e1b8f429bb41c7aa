"""Test support shipped with the library: every testing aid, imported from one place.

* :class:`FaultyChannel` (with :class:`FaultRates`, :class:`FaultChooser` and the ``CHOICE_*``
  names): the one sans-IO fault-injecting channel of encoded messages; it drops, duplicates,
  delays and reorders them from a seed or from Hypothesis draws (docs/design.md#ownership).
* :class:`LoopbackNetwork`: one receiver and N senders over :class:`FaultyChannel` pairs.

Time enters as ``now_ns`` (no clock is read); it must not go backwards between calls.
"""

from __future__ import annotations

from ._faulty import (
    CHOICE_DELAY,
    CHOICE_DROP,
    CHOICE_DUPLICATE,
    CHOICE_REORDER,
    CHOICE_REORDER_PICK,
    NO_FAULTS,
    ChannelStatistics,
    FaultChooser,
    FaultRates,
    FaultyChannel,
)
from ._loopback import LoopbackNetwork, LoopbackStatistics

__all__ = [
    "CHOICE_DELAY",
    "CHOICE_DROP",
    "CHOICE_DUPLICATE",
    "CHOICE_REORDER",
    "CHOICE_REORDER_PICK",
    "NO_FAULTS",
    "ChannelStatistics",
    "FaultChooser",
    "FaultRates",
    "FaultyChannel",
    "LoopbackNetwork",
    "LoopbackStatistics",
]
