"""Typed exceptions of :mod:`tent_sched`.

The same names as :mod:`tent_credit.errors` (docs/design.md#ownership) so the two packages stay
independent yet read alike: ``InvalidArgument`` (IA), ``InvalidEntry`` (IE), ``TooManyRequests``
(TMR) of the reference (docs/semantics.md). Expected outcomes (a drop, a blocked owner) are values.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "ExceedsDispatchWindow",
    "InvalidArgument",
    "InvalidEntry",
    "SchedError",
    "TooManyRequests",
]


class SchedError(Exception):
    """Base class of every exception raised by :mod:`tent_sched`."""


class InvalidArgument(SchedError, ValueError):
    """IA: an argument is malformed or out of range. Nothing changed."""


class InvalidEntry(SchedError, LookupError):
    """IE: the id named is unknown or in the wrong state. Nothing changed."""


class TooManyRequests(SchedError):
    """TMR: a capacity limit or batch slot bound would be exceeded. Nothing changed."""


class ConfigError(InvalidArgument):
    """A configuration value is missing, of the wrong type, out of range or unknown."""


class ExceedsDispatchWindow(InvalidArgument, TooManyRequests):
    """An owner longer than ``max_dispatch_bytes``, refused at submit: an InvalidArgument (no
    retry can ever dispatch it) that is also a TooManyRequests, TENT's answer for it, so a caller
    ported from TENT catches it either way. Nothing changed."""
