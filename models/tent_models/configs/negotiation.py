"""Named configurations of the version-negotiation spec (:mod:`tent_spec.negotiation`).

``tiny`` is for unit tests, ``ci`` is what ``tent check`` runs exhaustively, ``deep`` is for
benchmark campaigns (as for every family; see :mod:`tent_models.configs`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tent_spec.negotiation import NegotiationBounds, NegotiationSpec

from tent_models.model_api import SpecModel

__all__ = ["CONFIGS", "NEGOTIATION_BOUNDS"]

NEGOTIATION_BOUNDS: Mapping[str, NegotiationBounds] = {
    "tiny": NegotiationBounds(
        local_versions=(1,),
        peer_offers=((1,), (2,)),
        max_session=2,
        max_epoch=2,
        max_inflight=1,
    ),
    "ci": NegotiationBounds(
        local_versions=(1, 2),
        peer_offers=((1,), (3,), (2, 3)),
        max_session=2,
        max_epoch=2,
        max_inflight=2,
    ),
    "deep": NegotiationBounds(
        local_versions=(1, 2, 3),
        peer_offers=((1,), (4,), (2, 3), (3, 4, 5)),
        max_session=3,
        max_epoch=3,
        max_inflight=3,
    ),
}


def _negotiation(level: str) -> Callable[[], SpecModel[Any]]:
    def build() -> SpecModel[Any]:
        return NegotiationSpec(NEGOTIATION_BOUNDS[level], name=f"negotiation/{level}")

    return build


CONFIGS: Mapping[str, Callable[[], SpecModel[Any]]] = {
    f"negotiation/{level}": _negotiation(level) for level in NEGOTIATION_BOUNDS
}
"""Model name -> factory of a fresh negotiation model under that configuration."""
