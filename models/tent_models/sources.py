"""The public documents that ``tent`` output cites, by title and URL.

An invariant's ``cites`` text names the project's own pages by path and anchor
(``docs/semantics.md#sender-ledger``) and the public documents by short name ("RFC rule 4",
``Deadline Scheduling "Promotion"``). :func:`citation_legend` resolves the short names for a reader
of a terminal, who may not have the repository's ``docs/sources.md`` at hand.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["CREDIT_RFC", "DEADLINE_SCHEDULING", "Source", "citation_legend"]


class Source(NamedTuple):
    short: str  # how a citation names it
    title: str
    url: str


CREDIT_RFC = Source(
    "RFC",
    "[RFC]: TENT Receiver-Advertised Credits and Upstream Backpressure (Mooncake #2849)",
    "https://github.com/kvcache-ai/Mooncake/issues/2849",
)
DEADLINE_SCHEDULING = Source(
    "Deadline Scheduling",
    "TENT Deadline Scheduling (Mooncake documentation)",
    "https://kvcache-ai.github.io/Mooncake/design/tent/deadline-scheduling.html",
)


def citation_legend(texts: Iterable[str]) -> list[str]:
    """One line per kind of citation in ``texts``: what it names and where to read it."""
    joined = "\n".join(texts)
    lines = [
        f"{source.short}: {source.title}, {source.url}"
        for source in (CREDIT_RFC, DEADLINE_SCHEDULING)
        if source.short in joined
    ]
    if "docs/" in joined:
        lines.append("docs/…#anchor: a page of this project's documentation (docs/sources.md)")
    return lines
