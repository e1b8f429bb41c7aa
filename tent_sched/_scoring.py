"""Device selection: the reader of the selection EWMA (Deadline Scheduling "Selection EWMA").

Selection answers "which NIC is the better choice right now": a NIC's predicted time for a slice
is ``(inflight + slice) / selection_ewma``, where ``inflight`` is its posted-but-uncompleted bytes.
The selection EWMA contains queueing on purpose, so a NIC that is slow because it is busy loses.
It never reads the transmit estimate, which is the deadline predictors' series.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._bandwidth import NicDevice
from ._describe import describe
from .errors import InvalidArgument, InvalidEntry

__all__ = ["score_devices", "select_device"]


def score_devices(devices: Iterable[NicDevice], slice_bytes: int) -> dict[str, float]:
    """Predicted seconds to move ``slice_bytes`` on each *available* NIC, in iteration order.

    ``predicted = (posted_bytes + slice_bytes) / selection_bps``. Unavailable NICs are left out;
    the result is empty when none is available. Raises ``InvalidArgument`` for ``slice_bytes``
    that is not an int >= 1, an element that is not a :class:`NicDevice`, or two NICs with the
    same name. Reads only; changes nothing.
    """
    if type(slice_bytes) is not int or slice_bytes < 1:
        raise InvalidArgument(f"slice_bytes must be an int >= 1, got {describe(slice_bytes)}")
    try:
        listed = list(devices)
    except TypeError:
        raise InvalidArgument(
            f"devices must be an iterable of NicDevice, got {describe(devices)}"
        ) from None
    scores: dict[str, float] = {}
    seen: set[str] = set()
    for device in listed:
        if not isinstance(device, NicDevice):
            raise InvalidArgument(f"not a NicDevice: {describe(device)}")
        if device.name in seen:
            raise InvalidArgument(f"NIC {describe(device.name)} appears twice")
        seen.add(device.name)
        if device.available:
            # selection_bps > 0 always: it is clamped to at least min_multiplier × seed > 0.
            scores[device.name] = (device.posted_bytes + slice_bytes) / device.selection_bps
    return scores


def select_device(devices: Iterable[NicDevice], slice_bytes: int) -> str:
    """The name of the available NIC with the lowest predicted time for ``slice_bytes``.

    Ties go to the NIC that comes first in iteration order (registration order for a
    :class:`~tent_sched._bandwidth.NicSet`), so equal NICs are chosen deterministically.
    Raises ``InvalidEntry`` when no NIC is available and ``InvalidArgument`` as
    :func:`score_devices` does. Reads only; changes nothing.
    """
    scores = score_devices(devices, slice_bytes)
    if not scores:
        raise InvalidEntry("no available NIC to select")
    best_name = ""
    best_time = 0.0
    for name, predicted in scores.items():
        if not best_name or predicted < best_time:  # strictly lower wins: ties keep the first
            best_name, best_time = name, predicted
    return best_name
