"""Exceptions shaped like ``pyverbs.pyverbs_error`` (names, message format, ``error_code``)."""

from __future__ import annotations

import os

__all__ = ["PyverbsError", "PyverbsRDMAError", "PyverbsUserError"]


class PyverbsError(Exception):
    """Base class of the soft device's verbs errors (pyverbs' ``PyverbsError``)."""

    def __init__(self, msg: str, error_code: int = -1) -> None:
        if error_code != -1:
            msg = f"{msg}. Errno: {error_code}, {os.strerror(error_code)}"
        super().__init__(msg)


class PyverbsRDMAError(PyverbsError):
    """A verbs call failed; ``error_code`` is the errno a real provider returns for the case."""

    def __init__(self, msg: str, error_code: int = -1) -> None:
        super().__init__(msg, error_code)
        self._error_code = error_code

    @property
    def error_code(self) -> int:
        return self._error_code


class PyverbsUserError(PyverbsError):
    """The caller misused the API (pyverbs' own argument checks, e.g. a WR without an SGE)."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg)
