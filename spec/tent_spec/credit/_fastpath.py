"""The credit spec's memoised fast path: :class:`CreditSpec`, the readable spec with its hot
methods replaced by memoised equals, plus the incremental fingerprint and the canonical
successor stream the checker's hot loop calls.

Speed only: the guards and effects of :mod:`tent_spec.credit._actions` stay the single
authority (a memo miss evaluates them), and ``tests/models/test_spec_fastpath.py`` checks every
memoised result against direct evaluation (:class:`~tent_spec.credit.ReadableCreditSpec`'s
definitions, restated there).
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable, Iterator
from hashlib import blake2b
from itertools import pairwise
from marshal import dumps
from typing import Any

from tent_spec.credit._model import ReadableCreditSpec, _pack_peer, _renumber
from tent_spec.credit._state import (
    CreditBounds,
    CreditState,
    Faults,
    Peer,
    SpecStep,
    Vec,
    _vadd,
    _vsub,
)

_CACHE_LIMIT = 1 << 18  # entries before a memo table is cleared (interned peers: not grown)
_CONTEXT_BITS = 24  # low bits of a canonical-step key: the context number
_CONTEXT_LIMIT = 1 << 16  # contexts numbered before every context-keyed table is cleared
# One memoised step of a sender: (action, arguments after the sender index, the sender's new
# Peer, the new fault counts). See "Memoisation" in the CreditSpec docstring.
_SenderStep = tuple[str, tuple[Hashable, ...], Peer, Faults]
# The canonical steps of a sender in one context, stored compactly (policy 1 of the class
# docstring): a flat tuple (instance, canonical new Peer, new Faults) per step, where an
# instance is (action, its arguments for sender 0, for sender 1, ...), shared by every step of
# that action and arguments; beside it an array of two 64-bit partial fingerprints per step,
# h(session, new faults) + h(slot, new Peer) for slot 0 and slot 1.
_CanonicalSteps = tuple[tuple[Any, ...], "array[int]"]
# (messages in the peer's bags, outstanding grant of its books, sequences within seq_cap,
# its fingerprint digest in each sender slot): see CreditSpec._summary.
_PeerSummary = tuple[int, Vec, bool, tuple[int, ...]]
_MASK64 = (1 << 64) - 1
_NO_STEPS: _CanonicalSteps = ((), array("Q"))  # shared by every context with no step


def _digest64(value: tuple[Any, ...]) -> int:
    """blake2b-64 of ``marshal.dumps(value, 2)`` as an unsigned int (format 2: no
    back-references, so equal values give equal bytes)."""
    return int.from_bytes(blake2b(dumps(value, 2), digest_size=8).digest(), "little")


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    """Store ``value`` in a memo table, clearing the table first when it is full."""
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[key] = value


class CreditSpec(ReadableCreditSpec):
    """The credit protocol as a finite transition system (structurally a ``SpecModel``), with
    the checker's fast path.

    Memoisation (speed only; the guards and effects stay the single authority):

    1. *Sender locality.* Every action of sender ``s`` reads only the receiver's session, the
       faults used, whether the bag has room, the free capacity (``grant`` only) and
       ``peers[s]``, and changes only ``peers[s]`` and the fault counts (no component names
       another sender). The checker's successor stream (``fingerprinted_successors``)
       therefore memoises each sender's canonical steps per such context
       (``_canonical_steps``), computed by the very guards and effects on the first state
       that has it; a step that touches anything else raises ``AssertionError`` there.
       ``successors`` memoises the raw steps the same way (``_sender_steps``).
       ``receiver_restart`` (it changes every sender) is evaluated directly.
    2. The per-sender body of each invariant reads the session, the room in the bag and
       ``peers[s]``; the names of the bodies that fail are memoised per such context and per
       state (``_failed_checks``), so the ten invariants of a new state cost one lookup.
    3. ``canonicalize`` and ``pack`` memoise per sender; the outstanding grant of a sender's
       books (for ``free_capacity``) too.

    Memory (what one memo entry keeps): canonical ``Peer`` values are interned
    (``_interned``, one shared object per value), and the interned ones that are canonical
    for a session are marked (``_canonical``, by ``(id(peer), session)``). The canonical-step
    memo, the one that grows with the model, is keyed by one int (the interned peer's ``id``
    and a small context number) and holds only references to shared objects and packed
    64-bit digests, never a ``Peer`` of its own: the raw successor peers an effect builds are
    dropped once renumbered. An ``id`` stays unambiguous because interned peers live as long
    as the intern table, and every id-keyed table is cleared with it (``_bound_memos``, at
    each entry point; a full intern table stops interning until then). Tables for arbitrary
    (not interned) peers keep the peer in the entry and confirm a hit with ``entry[0] is
    peer``. tests/models/test_spec_fastpath.py checks the memoised results against direct
    evaluation.
    """

    def __init__(self, bounds: CreditBounds, *, name: str = "credit") -> None:
        super().__init__(bounds, name=name)
        self._faults_interned: dict[Faults, Faults] = {}
        self._restart_cache: dict[tuple[int, int], tuple[Peer, Peer]] = {}
        self._restart_context: dict[tuple[int, int], tuple[Faults, int, Faults]] = {}
        self._facts_for: CreditState | None = None
        self._facts_value: tuple[int, Vec, bool] = (0, self._zero, True)
        # Interned canonical peers and their marks (see "Memory" in the class docstring).
        self._interned: dict[Peer, Peer] = {}
        self._canonical: set[tuple[int, int]] = set()
        # Id-keyed, cleared with the intern table: context -> number, and the canonical steps.
        self._contexts: dict[tuple[Any, ...], int] = {}
        self._canon_steps: dict[int, _CanonicalSteps] = {}
        self._instance_table: dict[tuple[str, tuple[Hashable, ...]], tuple[Any, ...]] = {}
        # Tables for any peer: each entry holds the peer itself, so its id cannot be reused
        # while the entry lives, and a hit is confirmed with ``entry[0] is peer``.
        self._canon_cache: dict[tuple[int, int], tuple[Peer, Peer]] = {}
        self._pack_cache: dict[int, tuple[Peer, tuple[Any, ...]]] = {}
        self._steps_cache: dict[tuple[Any, ...], tuple[Peer, list[_SenderStep]]] = {}
        self._check_cache: dict[tuple[int, int, bool], tuple[Peer, frozenset[str]]] = {}
        self._names_interned: dict[frozenset[str], frozenset[str]] = {}
        self._failed_for: CreditState | None = None
        self._failed_value: frozenset[str] = frozenset()
        self._summary_cache: dict[int, tuple[Peer, _PeerSummary]] = {}
        self._prefix_cache: dict[tuple[int, int], tuple[Faults, int]] = {}

    # ---- interning (see "Memory" in the class docstring) --------------------------------

    def _bound_memos(self) -> None:
        """Clear the intern table and every table keyed by an interned peer's ``id`` or a
        context number, together, once either is full. Called at entry points only, before
        any key is computed; an expansion that resumes after another one cleared the tables
        finds its peers unmarked and stores nothing under their ids (``_canonical_steps``)."""
        if len(self._interned) >= _CACHE_LIMIT or len(self._contexts) >= _CONTEXT_LIMIT:
            self._interned.clear()
            self._canonical.clear()
            self._contexts.clear()
            self._canon_steps.clear()

    def _intern(self, peer: Peer) -> Peer:
        """The one shared object equal to ``peer`` (so the id-keyed memos hit across states);
        ``peer`` itself, not interned, while the table is full."""
        interned = self._interned
        found = interned.get(peer)
        if found is not None:
            return found
        if len(interned) < _CACHE_LIMIT:
            interned[peer] = peer
        return peer

    def _intern_canonical(self, peer: Peer, session: int) -> Peer:
        """``_intern(peer)`` for a ``peer`` already renumbered for ``session``, marked
        canonical for it when interned."""
        interned = self._interned
        found = interned.get(peer)
        if found is None:
            if len(interned) >= _CACHE_LIMIT:
                return peer
            interned[peer] = found = peer
        self._canonical.add((id(found), session))
        return found

    # ---- derived quantities, memoised --------------------------------------------------

    def free_capacity(self, state: CreditState) -> Vec:
        """Capacity minus Σ (granted − released − reclaimed) over all books
        (docs/semantics.md#receiver-allocator)."""
        return self._facts(state)[1]

    def _facts(self, state: CreditState) -> tuple[int, Vec, bool]:
        """(messages in flight, free capacity, every sequence within ``seq_cap``) from the
        per-peer summaries; kept for the last state asked about (a new state is checked and
        bounded right after it is found, then expanded)."""
        if state is self._facts_for:
            return self._facts_value
        cache = self._summary_cache
        messages = 0
        free = self._capacity
        seq_ok = True
        for p in state.peers:
            entry = cache.get(id(p))
            count, outstanding, ok, _digests = (
                entry[1] if entry is not None and entry[0] is p else self._summary(p)
            )
            messages += count
            free = _vsub(free, outstanding)
            seq_ok = seq_ok and ok
        facts = (messages, free, seq_ok)
        self._facts_for, self._facts_value = state, facts
        return facts

    def _summary(self, peer: Peer) -> _PeerSummary:
        """What the hot loop reads of one sender, computed once per ``Peer`` object: messages
        in its two bags, its books' outstanding grant, whether its sequences are within
        ``seq_cap``, and its digest ``h(slot, peer)`` for every slot (``fingerprint``)."""
        entry = self._summary_cache.get(id(peer))
        if entry is not None and entry[0] is peer:
            return entry[1]
        outstanding = self._zero
        for b in peer.books:
            outstanding = _vadd(outstanding, _vsub(_vsub(b.granted, b.released), b.reclaimed))
        packed = _pack_peer(peer)
        summary = (
            sum(n for bag in (peer.to_sender, peer.to_receiver) for _, n in bag),
            outstanding,
            self._sequences_within_cap(peer),
            tuple(_digest64((slot, packed)) for slot in range(self.bounds.senders)),
        )
        _remember(self._summary_cache, id(peer), (peer, summary))
        return summary

    def _room(self, state: CreditState) -> bool:
        """Another message fits the bag bound (the count from ``_facts``)."""
        return self._facts(state)[0] < self.bounds.max_messages

    # ---- successors, memoised per sender (policy 1) ------------------------------------

    def successors(self, state: CreditState) -> Iterator[Any]:
        """Every enabled instance of ``_instances(state)``, in that order, with its successor.

        Each sender's steps come from the ``_sender_steps`` memo (policy 1 of the class
        docstring); ``receiver_restart`` is evaluated directly.
        """
        session, peers, _faults = state
        room = self._room(state)
        for s in range(len(peers)):
            for action, rest, new_peer, new_faults in self._sender_steps(state, s, room):
                yield SpecStep(
                    action,
                    (s, *rest),
                    CreditState(session, (*peers[:s], new_peer, *peers[s + 1 :]), new_faults),
                )
        if (
            self._receiver_restart_candidate(state)
            and self._guard["receiver_restart"](state) is None
        ):
            yield SpecStep("receiver_restart", (), self._effect["receiver_restart"](state))

    def _local_steps(
        self, state: CreditState, s: int
    ) -> Iterator[tuple[str, tuple[Hashable, ...], CreditState]]:
        """The enabled steps of sender ``s`` by its guards and effects; raises
        ``AssertionError`` if an effect changes the session or another sender (a memo keyed
        by sender ``s``'s context would then be unsound)."""
        guard, effect = self._guard, self._effect
        for action, args in self._sender_instances(state, s):
            if guard[action](state, *args) is not None:
                continue
            nxt = effect[action](state, *args)
            others_kept = all(
                q is p
                for j, (q, p) in enumerate(zip(nxt.peers, state.peers, strict=True))
                if j != s
            )
            if nxt.session != state.session or not others_kept:
                raise AssertionError(f"{action}{args!r} is not local to sender {s}")
            yield action, args, nxt

    def _sender_steps(self, state: CreditState, s: int, room: bool) -> list[_SenderStep]:
        """The enabled steps of sender ``s``, memoised per sender context.

        The context is (``peers[s]``, session, faults used, ``room`` = ``_room(state)``, and
        the free capacity when the sender's current books hold a demand, i.e. when ``grant``
        is a candidate). On a miss the steps are computed with ``_local_steps`` on ``state``
        (which raises ``AssertionError`` for a step that is not local to the sender).
        """
        peer = state.peers[s]
        free = (
            self.free_capacity(state)
            if peer.books[-1].demand or not self.PRUNE_CANDIDATES
            else None
        )
        key = (id(peer), state.session, state.faults, room, free)
        entry = self._steps_cache.get(key)
        if entry is not None and entry[0] is peer:
            return entry[1]
        steps = [
            (action, args[1:], nxt.peers[s], nxt.faults)
            for action, args, nxt in self._local_steps(state, s)
        ]
        _remember(self._steps_cache, key, (peer, steps))
        return steps

    # ---- invariant verdicts, memoised per sender (policy 2) ----------------------------

    def _every_sender(self, state: CreditState, check: str) -> bool:
        """``self._sender_checks[check](state, s)`` holds for every sender ``s`` (memoised)."""
        return check not in self._failed_checks(state)

    def _failed_checks(self, state: CreditState) -> frozenset[str]:
        """The names of the per-sender checks that fail for some sender of ``state``.

        Memoised for the last state asked about and, per sender, per (``peers[s]``, session,
        room in the bag): everything a per-sender body reads.
        """
        if state is self._failed_for:
            return self._failed_value
        cache = self._check_cache
        session = state.session
        room = self._room(state)
        failed: frozenset[str] = frozenset()
        for s, peer in enumerate(state.peers):
            key = (id(peer), session, room)
            entry = cache.get(key)
            if entry is None or entry[0] is not peer:
                names = frozenset(
                    name for name, body in self._sender_checks.items() if not body(state, s)
                )
                entry = (peer, self._names_interned.setdefault(names, names))
                _remember(cache, key, entry)
            if entry[1]:
                failed |= entry[1]
        self._failed_for, self._failed_value = state, failed
        return failed

    # ---- encoding and symmetry, memoised per sender (policy 3) -------------------------

    def pack(self, state: CreditState) -> tuple[Any, ...]:
        """Nested plain tuples of ints: every NamedTuple becomes a plain tuple (all fields are
        ints or plain tuples of ints already; vectors, tokens and in-flight items are plain)."""
        cache = self._pack_cache
        packed = []
        for p in state.peers:
            entry = cache.get(id(p))
            if entry is not None and entry[0] is p:
                packed.append(entry[1])
            else:
                q = _pack_peer(p)
                _remember(cache, id(p), (p, q))
                packed.append(q)
        return (state.session, tuple(state.faults), tuple(packed))

    def canonicalize(self, state: CreditState) -> CreditState:
        """Renumber sequences by rank per key, then sort the interchangeable senders.

        1. Sequences are only compared, and a new one exceeds every live one, so replacing the
           live values of each key's update and usage sequences by their ranks (0 stays 0)
           keeps every guard and effect (data independence).
        2. No component names another sender, so sorting the per-sender :class:`Peer` slots
           picks one representative of the permutation orbit.
        """
        self._bound_memos()
        cache = self._canon_cache
        marks = self._canonical
        session = state.session
        peers = []
        for p in state.peers:
            key = (id(p), session)
            if key in marks:  # an interned canonical peer is its own representative
                peers.append(p)
                continue
            entry = cache.get(key)
            if entry is not None and entry[0] is p:
                peers.append(entry[1])
            else:
                q = self._intern_canonical(_renumber(p, session), session)
                _remember(cache, key, (p, q))
                peers.append(q)
        peers.sort()
        return CreditState(session, tuple(peers), state.faults)

    # ---- checker fast path (speed only; proven equal in tests/models/test_spec_fastpath.py) --

    def fingerprint(self, state: CreditState) -> int:
        """A stable 64-bit fingerprint, incremental over the senders (AdHash).

        ``(h(session, faults) + Σ_s h(s, peers[s])) mod 2**64`` where ``h`` is blake2b-64 of the
        marshalled value (format 2) and each ``h(s, peer)`` is memoised per ``Peer``. Equal
        states get equal fingerprints in every process (no salted ``hash()``). Two distinct
        states differ in the (session, faults) part or in some slot ``s``, so one independent
        digest enters their difference with coefficient 1: modelling blake2b as a random
        function they collide with probability 2**-64, the bound the checker reports (Bellare
        and Micciancio, "A New Paradigm for Collision-free Hashing", 1997).
        """
        summary = self._summary
        total = self._prefix(state.session, state.faults)
        for s, p in enumerate(state.peers):
            total += summary(p)[3][s]
        return total & _MASK64

    def _prefix(self, session: int, faults: Faults) -> int:
        """``h(session, faults)`` of ``fingerprint``."""
        key = (id(faults), session)
        entry = self._prefix_cache.get(key)
        if entry is None or entry[0] is not faults:
            entry = (faults, _digest64((session, tuple(faults))))
            _remember(self._prefix_cache, key, entry)
        return entry[1]

    def fingerprinted_successors(
        self, state: CreditState
    ) -> Iterator[tuple[str, tuple[Hashable, ...], CreditState, int]]:
        """``(action, args, canonicalize(next), fingerprint(canonicalize(next)))`` for every
        step of ``successors(state)``, in the same order.

        For a canonical ``state`` (what the checker expands) the other senders are already
        renumbered and interned, so only the changed sender is canonicalised - once per
        memoised sender step, with its slot digests - and the successor's fingerprint is a
        sum of cached digests. Any other state takes the plain path.
        """
        self._bound_memos()
        session, peers, _faults = state
        if not self._is_canonical(state):
            interned = self.canonicalize(state)
            if interned != state:  # not canonical: the plain path
                canonicalize, fingerprint = self.canonicalize, self.fingerprint
                for step in self.successors(state):
                    nxt = canonicalize(step.state)
                    yield step.action, step.args, nxt, fingerprint(nxt)
                return
            # a canonical value in other objects (e.g. unpickled in a worker): use the shared
            # Peer objects, whose steps are equal and memoised
            state = interned
            session, peers, _faults = state
        messages, free, _seq_ok = self._facts(state)
        room = messages < self.bounds.max_messages
        n = len(peers)
        new_state = tuple.__new__  # CreditState(...) without the Python-level __new__
        for s in range(n):
            flat, digests = self._canonical_steps(state, s, room, free)
            if not flat:
                continue
            at = 1 + s  # an instance holds the arguments for sender s at index 1 + s
            items = iter(flat)
            if n == 2:
                other = peers[1 - s]
                other_first, other_second = self._summary(other)[3]
                parts = iter(digests)
                # first/second: h(session, new faults) + h(slot, new_peer) per slot
                for instance, new_peer, new_faults, first, second in zip(
                    items, items, items, parts, parts, strict=True
                ):
                    if new_peer <= other:
                        yield (
                            instance[0],
                            instance[at],
                            new_state(CreditState, (session, (new_peer, other), new_faults)),
                            (first + other_second) & _MASK64,
                        )
                    else:
                        yield (
                            instance[0],
                            instance[at],
                            new_state(CreditState, (session, (other, new_peer), new_faults)),
                            (second + other_first) & _MASK64,
                        )
            else:
                others = [*peers[:s], *peers[s + 1 :]]
                for instance, new_peer, new_faults in zip(items, items, items, strict=True):
                    nxt = CreditState(session, tuple(sorted((*others, new_peer))), new_faults)
                    yield instance[0], instance[at], nxt, self.fingerprint(nxt)
        if (
            self._receiver_restart_candidate(state)
            and self._guard["receiver_restart"](state) is None
        ):
            nxt = self._restarted(state)
            yield "receiver_restart", (), nxt, self.fingerprint(nxt)

    def _restarted(self, state: CreditState) -> CreditState:
        """``canonicalize(receiver_restart(state))`` from per-sender memos.

        The effect maps each sender's ``Peer`` on its own, given the session (and the fault
        counts on their own), so its canonical image is memoised per (``Peer``, session); on any
        miss the effect itself is evaluated once and every image taken from its result.
        """
        session, peers, faults = state
        cache = self._restart_cache
        images = []
        for p in peers:
            entry = cache.get((id(p), session))
            if entry is None or entry[0] is not p:
                break
            images.append(entry[1])
        context = self._restart_context.get((id(faults), session))
        if len(images) != len(peers) or context is None or context[0] is not faults:
            raw = self._effect["receiver_restart"](state)
            images = [
                self._intern_canonical(_renumber(image, raw.session), raw.session)
                for image in raw.peers
            ]
            for p, canon in zip(peers, images, strict=True):
                _remember(cache, (id(p), session), (p, canon))
            context = (
                faults,
                raw.session,
                self._faults_interned.setdefault(raw.faults, raw.faults),
            )
            _remember(self._restart_context, (id(faults), session), context)
        return CreditState(context[1], tuple(sorted(images)), context[2])

    def intern(self, state: CreditState) -> CreditState:
        """An equal state built from this process's shared ``Peer`` and ``Faults`` objects, so
        the id-keyed memos hit for a state that arrives as fresh objects (unpickled in a
        checker worker)."""
        self._bound_memos()
        faults = self._faults_interned.setdefault(state.faults, state.faults)
        return CreditState(state.session, tuple(self._intern(p) for p in state.peers), faults)

    def invariants_hold(self, state: CreditState) -> bool:
        """Every invariant of ``invariants()`` holds (one memoised pass instead of ten):
        the capacity sum, then each sender's memoised verdict (``_failed_checks``)."""
        messages, free, _seq_ok = self._facts(state)
        if min(free) < 0:
            return False
        cache = self._check_cache
        session = state.session
        room = messages < self.bounds.max_messages
        for peer in state.peers:
            entry = cache.get((id(peer), session, room))
            if entry is None or entry[0] is not peer:
                return not self._failed_checks(state)  # computes and memoises the verdicts
            if entry[1]:
                return False
        return True

    def _is_canonical(self, state: CreditState) -> bool:
        """Every sender is an interned ``Peer`` marked canonical for the session, and the
        senders are sorted."""
        marks = self._canonical
        session = state.session
        peers = state.peers
        for p in peers:
            if (id(p), session) not in marks:
                return False
        if len(peers) == 2:
            return peers[0] <= peers[1]
        return all(a <= b for a, b in pairwise(peers))

    def _canonical_steps(
        self, state: CreditState, s: int, room: bool, free_capacity: Vec
    ) -> _CanonicalSteps:
        """The steps of ``_sender_steps`` with each new ``Peer`` canonicalised (renumbered for
        the session, then interned) and its partial fingerprints, in the compact form of
        ``_CanonicalSteps``; memoised per context (policy 1: ``peers[s]``, which must be
        interned and canonical, session, faults, ``room``, the free capacity when ``grant``
        is a candidate). The steps do not depend on ``s`` beyond the arguments, which every
        instance holds for each sender. ``room`` and ``free_capacity`` are ``state``'s."""
        peer = state.peers[s]
        session = state.session
        free = free_capacity if peer.books[-1].demand or not self.PRUNE_CANDIDATES else None
        context = (session, state.faults, room, free)
        contexts = self._contexts
        number = contexts.get(context)
        if number is None:
            number = contexts[context] = len(contexts)
        key = (id(peer) << _CONTEXT_BITS) | number
        entry = self._canon_steps.get(key)
        if entry is not None:
            return entry
        flat: list[Any] = []
        parts: list[int] = []
        for action, args, nxt in self._local_steps(state, s):
            canon = self._intern_canonical(_renumber(nxt.peers[s], session), session)
            # shared Faults objects make the id-keyed prefix memo hit across states
            new_faults = self._faults_interned.setdefault(nxt.faults, nxt.faults)
            prefix = self._prefix(session, new_faults)
            slots = self._summary(canon)[3]
            flat += (self._instance(action, args[1:]), canon, new_faults)
            parts += ((prefix + slots[0]) & _MASK64, (prefix + slots[-1]) & _MASK64)
        entry = (tuple(flat), array("Q", parts)) if flat else _NO_STEPS
        # the key names the peer by id: stored only while the peer is interned
        if (id(peer), session) in self._canonical:
            _remember(self._canon_steps, key, entry)
        return entry

    def _instance(self, action: str, rest: tuple[Hashable, ...]) -> tuple[Any, ...]:
        """``(action, (0, *rest), (1, *rest), ...)``: the arguments of one action instance
        for each sender, one shared tuple per (action, rest)."""
        key = (action, rest)
        found = self._instance_table.get(key)
        if found is None:
            found = (action, *((s, *rest) for s in range(self.bounds.senders)))
            _remember(self._instance_table, key, found)
        return found

    def within_bounds(self, state: CreditState) -> bool:
        messages, _free, seq_ok = self._facts(state)
        return seq_ok and messages <= self.bounds.max_messages
