"""Submission: a batch of requests validated, merged into owners, admitted or sent past the queue.

``submit`` is all or nothing: it validates the batch, folds it into owners (``_owners_of``,
``merge_requests``), asks the gate for each owner's context (``_context_of``), then either admits
the owners to the queue as one batch (``AdmissionQueue.try_admit``) or, without a queue or under
Deadline Scheduling's bypass rule (module docstring of :mod:`._core`), hands them straight to the
rails; either way it ends with a dispatch pass. A mixin of :class:`DispatchCore` over
:mod:`._pass`.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from tent_credit import DispatchContext
from tent_credit import errors as credit_errors
from tent_sched import OwnerKind, OwnerRequest
from tent_sched import errors as sched_errors

from ..errors import InvalidArgument
from ._merge import Merged, merge
from ._pass import _CorePass
from ._records import TransferRecord, credit_plan, translate
from ._types import TransferPlan, TransferRequest


class _CoreSubmit(_CorePass):
    """Submission to a :class:`DispatchCore` (module docstring)."""

    # ---------------------------------------------------------------- submit

    def submit(self, requests: Sequence[TransferRequest], now_ns: int) -> tuple[int, ...]:
        """Submit transfers as one batch; return their transfer ids, in order.

        All or nothing: raises InvalidArgument (a non-request, a bad or backwards ``now_ns``, a
        request the gate cannot describe), InvalidEntry (a credited WRITE to a peer whose
        route is not registered with the gate) or TooManyRequests (the queue's capacity) and
        nothing is admitted. Then refills the dispatch window and posts; a drop or a gate
        rejection during that refill is reported by the next :meth:`progress`.
        """
        self._check_now(now_ns)
        batch = tuple(requests)
        for position, request in enumerate(batch):
            if not isinstance(request, TransferRequest):
                raise InvalidArgument(f"requests[{position}] is not a TransferRequest")
        if not batch:
            return ()
        owners = self._owners_of(batch)
        contexts = [self._context_of(merged) for merged in owners]
        bypass = self._queue is None or (
            not self._credit_active
            and any(r.kind is OwnerKind.USER and r.plan is TransferPlan.STAGED for r in batch)
        )
        ids = tuple(range(self._next_transfer, self._next_transfer + len(batch)))
        records = [
            TransferRecord(
                ids[min(m.indices)],
                m.request,
                now_ns,
                0,
                tuple((ids[i], batch[i].length) for i in m.indices),
            )
            for m in owners
        ]
        if not bypass:
            assert self._queue is not None
            token = self._next_batch
            owner_requests = [
                OwnerRequest(
                    public_id=min(merged.indices) + 1,
                    derived_ids=tuple(sorted(i + 1 for i in merged.indices))[1:],
                    length=merged.request.length,
                    kind=merged.request.kind,
                    deadline_ns=merged.request.deadline_ns,
                    # seed: eligible = routed to the rails and not staged
                    degradation_eligible=(
                        merged.request.plan is TransferPlan.DIRECT
                        and merged.request.kind is OwnerKind.USER
                    ),
                    priority=merged.request.priority,
                    gate_key=None if ctx is None else ctx.gate_key,
                    context=ctx,
                )
                for merged, ctx in zip(owners, contexts, strict=True)
            ]
            try:
                owner_ids = self._queue.try_admit(token, len(batch), owner_requests)
            except sched_errors.SchedError as exc:
                raise translate(exc) from exc
            self._next_batch += 1
            self._batch_live[token] = len(owner_ids)
            for record, owner_id in zip(records, owner_ids, strict=True):
                record.batch = token
                record.owner_id = owner_id
                self._by_owner[owner_id] = record
            self._queued += len(records)
        self._next_transfer += len(batch)
        self._submitted += len(batch)
        self._merged += len(batch) - len(records)
        for record in records:
            for tid, _length in record.parts:
                self._records[tid] = record
        if bypass:
            self._bypassed += len(records)
            for record in records:
                self._hand_off(record, None)
        self._dispatch(now_ns)
        return ids

    def _owners_of(self, batch: tuple[TransferRequest, ...]) -> list[Merged]:
        """The submit's owners: its requests, or with ``merge_requests`` their merged runs."""
        if not self._config.merge_requests:
            return [Merged(request, (index,)) for index, request in enumerate(batch)]
        queue = self._config.sched.runtime_queue
        limit = queue.max_dispatch_bytes if self._queue is not None else None
        default_qos = self._config.receiver_credit.default_qos_class
        return merge(batch, default_qos=default_qos, limit=limit)

    def _context_of(self, merged: Merged) -> DispatchContext | None:
        """The gate's context of an owner (``None`` without an active gate); raises the gate's
        typed error for a request it cannot describe."""
        if self._gate is None or not self._credit_active:
            return None  # a DISABLED gate is exactly no gate (docs/gate.md)
        request = merged.request
        default_qos = self._config.receiver_credit.default_qos_class
        qos = default_qos if request.qos_class is None else request.qos_class
        try:
            context = self._gate.context(credit_plan(request), request.peer, qos)
            if len(merged.indices) > 1:  # the slots are charged per request
                context = attrs.evolve(context, requests=len(merged.indices))
        except credit_errors.CreditError as exc:
            raise translate(exc) from exc
        return context
