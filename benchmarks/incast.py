"""The RFC's incast matrix through the real engine (issue 13); ``tent bench incast`` is the same.

    python benchmarks/incast.py --out incast.jsonl          # the default matrix (3 repetitions)
    python benchmarks/incast.py --smoke --out smoke.jsonl   # CI: 4 senders, one repetition
    python benchmarks/incast.py --device softverbs -r 1 --out softverbs.jsonl  # soft verbs rows
    python benchmarks/incast.py --smoke --network netns --out netns.jsonl  # root: two namespaces
    tent bench verify incast.jsonl && tent bench report incast.jsonl --out incast-report

See ``docs/incast.md`` for the rows, the record's fields and how to read the report.
"""

from __future__ import annotations

from tent_transport.incast._cli import incast_command

if __name__ == "__main__":
    incast_command()
