"""A validator for the small subset of CDDL (RFC 8610) that ``spec/wire.cddl`` uses.

No CDDL validator on PyPI is reliable enough to depend on (``pycddl`` 0.6.4 ignores occurrence
bounds on arrays of arrays and tries only the first of several array choices), so the tests use
this one. It parses rather than pattern-matches: anything outside the subset below is a
:class:`CddlError` at load time, so the schema cannot silently stop being checked.

Subset::

    rule   = NAME "=" type
    type   = type1 *("/" type1)
    type1  = type2 [".." type2] [".size" type2]
    type2  = INT / NAME / "[" group "]" / "(" type ")" / "#6." INT "(" type ")"
    group  = [entry *("," entry) [","]]
    entry  = [occur] [NAME ":"] type
    occur  = [INT] "*" [INT]

Prelude names: ``uint`` and ``bstr``. Values are what ``cbor2`` decodes, with tags kept as
:class:`cbor2.CBORTag` (see :func:`load_cbor`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cbor2

__all__ = ["CddlError", "Schema", "load_cbor"]


class CddlError(Exception):
    """The schema text is outside the supported subset, or names an undefined rule."""


@dataclass(frozen=True)
class _Int:
    value: int


@dataclass(frozen=True)
class _Range:
    low: int
    high: int


@dataclass(frozen=True)
class _Ref:
    name: str


@dataclass(frozen=True)
class _Choice:
    options: tuple[_Node, ...]


@dataclass(frozen=True)
class _Entry:
    minimum: int
    maximum: int | None  # None = unbounded
    node: _Node


@dataclass(frozen=True)
class _Array:
    entries: tuple[_Entry, ...]


@dataclass(frozen=True)
class _Tag:
    number: int
    node: _Node


@dataclass(frozen=True)
class _Size:
    node: _Node
    size: _Node  # an _Int (byte width of a uint, or exact bstr length) or a _Range


_Node = _Int | _Range | _Ref | _Choice | _Array | _Tag | _Size

_TOKEN = re.compile(
    r"\s*(?:(?P<tag>#6\.(?P<tagnum>\d+))|(?P<ctl>\.[a-z]+)|(?P<dots>\.\.)"
    r"|(?P<int>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_-]*)|(?P<punct>[=/\[\](),:*]))"
)
_PRELUDE = frozenset({"uint", "bstr"})


def _tokenize(text: str) -> list[tuple[str, str]]:
    body = "\n".join(line.split(";", 1)[0] for line in text.splitlines())
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(body):
        if body[pos:].strip() == "":
            break
        match = _TOKEN.match(body, pos)
        if match is None:
            raise CddlError(f"unsupported syntax at {body[pos : pos + 20]!r}")
        pos = match.end()
        if match["tag"]:
            tokens.append(("tag", match["tagnum"]))
        elif match["dots"]:
            tokens.append(("dots", ".."))
        elif match["ctl"]:
            tokens.append(("ctl", match["ctl"]))
        elif match["int"]:
            tokens.append(("int", match["int"]))
        elif match["name"]:
            tokens.append(("name", match["name"]))
        else:
            tokens.append(("punct", match["punct"]))
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self, offset: int = 0) -> tuple[str, str] | None:
        index = self.pos + offset
        return self.tokens[index] if index < len(self.tokens) else None

    def take(self, kind: str, text: str | None = None) -> str:
        token = self.peek()
        if token is None or token[0] != kind or (text is not None and token[1] != text):
            raise CddlError(f"expected {text or kind}, got {token!r}")
        self.pos += 1
        return token[1]

    def at(self, kind: str, text: str | None = None, offset: int = 0) -> bool:
        token = self.peek(offset)
        return token is not None and token[0] == kind and (text is None or token[1] == text)

    def rules(self) -> dict[str, _Node]:
        rules: dict[str, _Node] = {}
        while self.peek() is not None:
            name = self.take("name")
            self.take("punct", "=")
            if name in rules:
                raise CddlError(f"rule {name} defined twice")
            rules[name] = self.type()
        return rules

    def type(self) -> _Node:
        options = [self.type1()]
        while self.at("punct", "/"):
            self.pos += 1
            options.append(self.type1())
        return options[0] if len(options) == 1 else _Choice(tuple(options))

    def type1(self) -> _Node:
        node = self.type2()
        if self.at("dots"):
            self.pos += 1
            high = self.type2()
            if not isinstance(node, _Int) or not isinstance(high, _Int):
                raise CddlError("ranges are supported between integer literals only")
            node = _Range(node.value, high.value)
        if self.at("ctl"):
            control = self.take("ctl")
            if control != ".size":
                raise CddlError(f"unsupported control operator {control}")
            size = self.type2()
            if isinstance(size, _Range | _Int):
                return _Size(node, size)
            raise CddlError(".size takes an integer or an integer range")
        return node

    def type2(self) -> _Node:
        if self.at("int"):
            return _Int(int(self.take("int")))
        if self.at("name"):
            return _Ref(self.take("name"))
        if self.at("punct", "["):
            self.pos += 1
            entries: list[_Entry] = []
            while not self.at("punct", "]"):
                entries.append(self.entry())
                if not self.at("punct", "]"):
                    self.take("punct", ",")
            self.pos += 1
            return _Array(tuple(entries))
        if self.at("punct", "("):
            self.pos += 1
            node = self.type()
            self.take("punct", ")")
            return node
        if self.at("tag"):
            number = int(self.take("tag"))
            self.take("punct", "(")
            node = self.type()
            self.take("punct", ")")
            return _Tag(number, node)
        raise CddlError(f"unsupported type at token {self.peek()!r}")

    def entry(self) -> _Entry:
        minimum: int = 1
        maximum: int | None = 1
        if self.at("punct", "*") or (self.at("int") and self.at("punct", "*", offset=1)):
            minimum = int(self.take("int")) if self.at("int") else 0
            self.take("punct", "*")
            maximum = int(self.take("int")) if self.at("int") else None
        if self.at("name") and self.at("punct", ":", offset=1):
            self.pos += 2  # a member key documents the position; it does not constrain
        return _Entry(minimum, maximum, self.type())


class Schema:
    """A parsed CDDL schema; :meth:`matches` checks a decoded CBOR value against one rule."""

    def __init__(self, text: str) -> None:
        self.rules = _Parser(_tokenize(text)).rules()
        for node in self.rules.values():
            self._check_refs(node)

    @classmethod
    def from_file(cls, path: Path) -> Schema:
        return cls(path.read_text(encoding="utf-8"))

    def _check_refs(self, node: _Node) -> None:
        if isinstance(node, _Ref):
            if node.name not in self.rules and node.name not in _PRELUDE:
                raise CddlError(f"undefined rule {node.name}")
        elif isinstance(node, _Choice):
            for option in node.options:
                self._check_refs(option)
        elif isinstance(node, _Array):
            for entry in node.entries:
                self._check_refs(entry.node)
        elif isinstance(node, _Tag | _Size):
            self._check_refs(node.node)

    def matches(self, rule: str, value: Any) -> bool:
        """Whether ``value`` (a decoded CBOR item) conforms to ``rule``."""
        if rule not in self.rules:
            raise CddlError(f"undefined rule {rule}")
        return self._match(self.rules[rule], value)

    def _match(self, node: _Node, value: Any) -> bool:
        if isinstance(node, _Int):
            return type(value) is int and value == node.value
        if isinstance(node, _Range):
            return type(value) is int and node.low <= value <= node.high
        if isinstance(node, _Ref):  # the prelude's uint and bstr, or a rule of the schema
            if node.name == "uint":
                return type(value) is int and value >= 0
            if node.name == "bstr":
                return type(value) is bytes
            return self._match(self.rules[node.name], value)
        if isinstance(node, _Choice):
            return any(self._match(option, value) for option in node.options)
        if isinstance(node, _Tag):
            return (
                isinstance(value, cbor2.CBORTag)
                and value.tag == node.number
                and self._match(node.node, value.value)
            )
        if isinstance(node, _Size):
            return self._match(node.node, value) and self._size_ok(node.size, value)
        return type(value) is list and self._match_entries(node.entries, value, 0, 0)

    @staticmethod
    def _size_ok(size: _Node, value: Any) -> bool:
        if type(value) is int:  # RFC 8610 §3.8.1: a uint fits in `size` bytes
            if not isinstance(size, _Int):
                raise CddlError("a uint .size takes one integer")
            return bool(value < 256**size.value)
        length = len(value)
        if isinstance(size, _Int):
            return length == size.value
        assert isinstance(size, _Range)
        return size.low <= length <= size.high

    def _match_entries(
        self, entries: Sequence[_Entry], items: list[Any], entry_index: int, item_index: int
    ) -> bool:
        if entry_index == len(entries):
            return item_index == len(items)
        entry = entries[entry_index]
        available = len(items) - item_index
        most = available if entry.maximum is None else min(entry.maximum, available)
        for count in range(most, entry.minimum - 1, -1):  # greedy, with backtracking
            taken = items[item_index : item_index + count]
            if all(self._match(entry.node, item) for item in taken) and self._match_entries(
                entries, items, entry_index + 1, item_index + count
            ):
                return True
        return False


def load_cbor(data: bytes) -> Any:
    """Decode ``data`` keeping tag 2 (bignum) as a :class:`cbor2.CBORTag`, as CDDL sees it."""

    def keep_bignum(value: Any, _immutable: bool) -> cbor2.CBORTag:
        return cbor2.CBORTag(2, value)

    return cbor2.loads(data, semantic_decoders={2: keep_bignum})
