"""The incast verifier: the acceptance rules a record must pass (``tent bench verify``).

Rules, each naming what it fails (a record may fail several):

1. ``schema``: every field of :data:`SCHEMA`, of its type, and nothing else; a run that could
   not be carried out (an ``error`` record) fails here too.
2. ``capacity``: in credit mode, no resource's occupancy ever exceeded its capacity. In
   disabled and fixed modes the violations are reported (they are the comparison), not failed.
3. ``integrity``: no landed block differed from what its sender wrote.
4. ``refused``: no write of an honest sender was refused (every sender of the bench is honest),
   and no sender was quarantined.
5. ``accounting``: completed + failed_fenced == offered, and no other failure: only a receiver
   restart may fail work, and only with a typed (fenced) outcome; the resubmit policy is none.
6. ``final_occupancy``: once the consumer drained, nothing is left occupied (occupancy and the
   credit allocator's outstanding amounts are all zero).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from ._records import check_schema

__all__ = ["Failure", "verify_record", "verify_records"]


@attrs.frozen
class Failure:
    index: int
    row: str
    mode: str
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"record {self.index} ({self.row}, {self.mode}): {self.rule}: {self.detail}"


def verify_record(record: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The (rule, detail) failures of one record (empty: it passes)."""
    if "error" in record:
        return [("schema", f"the run failed: {record['error']}")]
    schema = check_schema(record)
    if schema:
        return [("schema", "; ".join(schema))]
    out: list[tuple[str, str]] = []
    if record["mode"] == "credit":
        over = {r: v for r, v in record["violations_by_resource"].items() if v}
        peak = record["peak_occupancy"]
        capacity = record["capacity"]
        over.update({r: peak[r] for r in peak if r in capacity and peak[r] > capacity[r]})
        if record["capacity_violations"] or over:
            out.append(
                (
                    "capacity",
                    f"credit mode exceeded capacity: {over or record['capacity_violations']}",
                )
            )
    if record["integrity_errors"]:
        out.append(("integrity", f"{record['integrity_errors']} blocks landed corrupt"))
    if record["refused_writes"] or record["quarantined"]:
        out.append(
            (
                "refused",
                f"{record['refused_writes']} honest writes refused, quarantined "
                f"{record['quarantined']}",
            )
        )
    total = record["completed"] + record["failed_fenced"]
    if total != record["offered"] or record["failed_other"]:
        out.append(
            (
                "accounting",
                f"completed {record['completed']} + failed_fenced {record['failed_fenced']} != "
                f"offered {record['offered']} or failed_other {record['failed_other']} "
                f"({record['failure_details']})",
            )
        )
    left = {r: v for r, v in record["final_occupancy"].items() if v}
    left.update({f"credit:{r}": v for r, v in record["credit_outstanding"].items() if v})
    if left:
        out.append(("final_occupancy", f"left occupied after the drain: {left}"))
    return out


def verify_records(records: Iterable[Mapping[str, Any]]) -> list[Failure]:
    """Every failure of every record (an empty file fails: nothing was verified)."""
    failures = []
    n = -1
    for n, record in enumerate(records):
        for rule, detail in verify_record(record):
            failures.append(
                Failure(n, str(record.get("row", "?")), str(record.get("mode", "?")), rule, detail)
            )
    if n < 0:
        failures.append(Failure(0, "-", "-", "schema", "no records"))
    return failures
