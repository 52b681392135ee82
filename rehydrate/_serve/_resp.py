"""RESP, the Redis protocol: a request parser with limits and a reply writer (RESP2 and RESP3).

Pure: no I/O, no clock. The server feeds the parser what it reads and writes what the writer
makes, so a malformed or hostile request is refused here, before any command runs, with the texts
Redis itself sends (clients and tools match on them).

The parser takes requests as Redis does: multibulk (``*2\\r\\n$4\\r\\nPING...``, what every client
sends) and inline (``PING\\r\\n``, what a person types into ``nc`` or ``telnet``), many per read
(pipelining). Every size is bounded: a bulk, the number of arguments, an inline line, and what one
request holds altogether, so one client cannot make the server buffer without end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

__all__ = [
    "DEFAULT_MAX_BULK",
    "NIL2",
    "NIL3",
    "OK",
    "PONG",
    "Parser",
    "ProtocolError",
    "array",
    "bulk",
    "error",
    "integer",
    "map_reply",
    "nil",
    "simple",
    "split_inline",
]

#: The longest bulk (one argument) a request may hold by default: an element of a few MB.
DEFAULT_MAX_BULK: Final = 4 * 1024 * 1024
#: Redis's own limits: arguments in one multibulk request, and an inline request's length.
MAX_ARGS: Final = 1024 * 1024
MAX_INLINE: Final = 64 * 1024

OK: Final = b"+OK\r\n"
PONG: Final = b"+PONG\r\n"
NIL2: Final = b"$-1\r\n"
NIL3: Final = b"_\r\n"


class ProtocolError(Exception):
    """A request that cannot be read. Its text is what Redis answers (``Protocol error: ...``);
    after it the connection is closed, as Redis does, since where the next request starts is lost."""


class Parser:
    """Splits the bytes a client sends into requests, each a list of arguments (``bytes``).

    Feed it with :meth:`feed`, then take the complete requests with :meth:`requests`; a request
    cut between two reads stays buffered until the rest arrives.
    """

    __slots__ = ("_buffer", "_error", "_max_bulk", "_max_request", "_pos")

    def __init__(self, *, max_bulk: int = DEFAULT_MAX_BULK) -> None:
        self._buffer = bytearray()
        self._pos = 0
        self._error: ProtocolError | None = None
        self._max_bulk = max_bulk
        # A request of many arguments (XACK with thousands of ids) may be larger than one bulk,
        # but not without end: what is buffered for one request is bounded too.
        self._max_request = max(4 * max_bulk, MAX_INLINE)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet taken as requests."""
        return len(self._buffer) - self._pos

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buffer[: self._pos]
            self._pos = 0
        self._buffer += data

    def requests(self) -> list[list[bytes]]:
        """The complete requests buffered, in order. At a malformed one, the requests before it
        are returned, and the next call raises :class:`ProtocolError` (as Redis runs what came
        before the bad request, answers the error, and closes the connection)."""
        if self._error is not None:
            raise self._error
        found: list[list[bytes]] = []
        try:
            self._parse(found)
        except ProtocolError as exc:
            if not found:
                raise
            self._error = exc
        return found

    def _parse(self, found: list[list[bytes]]) -> None:
        buffer = self._buffer
        end = len(buffer)
        # The hot loop of the server (benchmarks/bench_serve.py): one pass over the buffer,
        # slicing arguments out of it, with no call per argument.
        while self._pos < end:
            start = self._pos
            if buffer[start] != 0x2A:  # not '*': an inline request
                request = self._inline(start, end)
                if request is None:
                    break
                if request:
                    found.append(request)
                continue
            line_end = buffer.find(b"\r\n", start)
            if line_end < 0:
                if end - start > MAX_INLINE:
                    raise ProtocolError("Protocol error: too big mbulk count string")
                break
            try:
                count = int(buffer[start + 1 : line_end])
            except ValueError:
                raise ProtocolError("Protocol error: invalid multibulk length") from None
            if count > MAX_ARGS:
                raise ProtocolError("Protocol error: invalid multibulk length")
            pos = line_end + 2
            if count <= 0:  # Redis skips an empty multibulk
                self._pos = pos
                continue
            request = []
            complete = True
            for _ in range(count):
                if pos >= end:
                    complete = False
                    break
                if buffer[pos] != 0x24:  # '$'
                    got = chr(buffer[pos])
                    raise ProtocolError(f"Protocol error: expected '$', got '{got}'")
                line_end = buffer.find(b"\r\n", pos)
                if line_end < 0:
                    if end - pos > MAX_INLINE:
                        raise ProtocolError("Protocol error: too big bulk count string")
                    complete = False
                    break
                try:
                    length = int(buffer[pos + 1 : line_end])
                except ValueError:
                    raise ProtocolError("Protocol error: invalid bulk length") from None
                if length < 0 or length > self._max_bulk:
                    raise ProtocolError("Protocol error: invalid bulk length")
                pos = line_end + 2
                if pos + length + 2 > end:
                    if pos + length + 2 - start > self._max_request:
                        raise ProtocolError("Protocol error: request too large")
                    complete = False
                    break
                request.append(bytes(buffer[pos : pos + length]))
                pos += length + 2
            if not complete:
                if end - start > self._max_request:
                    raise ProtocolError("Protocol error: request too large")
                break
            found.append(request)
            self._pos = pos

    def _inline(self, start: int, end: int) -> list[bytes] | None:
        """An inline request (a line of words), or ``None`` if its line has not all arrived."""
        newline = self._buffer.find(b"\n", start)
        if newline < 0:
            if end - start > MAX_INLINE:
                raise ProtocolError("Protocol error: too big inline request")
            return None
        if newline - start > MAX_INLINE:
            raise ProtocolError("Protocol error: too big inline request")
        line = bytes(self._buffer[start:newline]).rstrip(b"\r")
        self._pos = newline + 1
        return split_inline(line)


_ESCAPES: Final = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}


def split_inline(line: bytes) -> list[bytes]:
    """The words of an inline request, quoted as ``redis-cli`` quotes them (``sdssplitargs``):
    ``"..."`` with backslash escapes (``\\n``, ``\\xHH``) and ``'...'`` taken literally."""
    words: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in b" \t\r\n\v\f":
            i += 1
        if i >= n:
            return words
        word = bytearray()
        quote = 0
        while True:
            if i >= n:
                if quote:
                    raise ProtocolError("Protocol error: unbalanced quotes in request")
                break
            c = line[i]
            if quote == 0x22:  # "..."
                if c == 0x5C and i + 3 < n and line[i + 1] == ord("x") and _hex(line[i + 2 : i + 4]):
                    word.append(int(line[i + 2 : i + 4], 16))
                    i += 3
                elif c == 0x5C and i + 1 < n:
                    i += 1
                    word.append(_ESCAPES.get(line[i], line[i]))
                elif c == 0x22:
                    if i + 1 < n and line[i + 1] not in b" \t\r\n\v\f":
                        raise ProtocolError("Protocol error: unbalanced quotes in request")
                    i += 1
                    break
                else:
                    word.append(c)
            elif quote == 0x27:  # '...'
                if c == 0x5C and i + 1 < n and line[i + 1] == 0x27:
                    i += 1
                    word.append(0x27)
                elif c == 0x27:
                    if i + 1 < n and line[i + 1] not in b" \t\r\n\v\f":
                        raise ProtocolError("Protocol error: unbalanced quotes in request")
                    i += 1
                    break
                else:
                    word.append(c)
            elif c in b" \t\r\n\v\f":
                break
            elif c in (0x22, 0x27):
                quote = c
            else:
                word.append(c)
            i += 1
        words.append(bytes(word))


def _hex(two: bytes) -> bool:
    return len(two) == 2 and all(c in b"0123456789abcdefABCDEF" for c in two)


# -- replies -----------------------------------------------------------------------------------------
# Each returns the bytes of one reply. ``proto`` is 2 or 3: the two differ here only in nil and
# maps (and the server answers nothing that would need RESP3's other types).


def simple(text: str) -> bytes:
    return b"+" + text.encode() + b"\r\n"


def error(text: str) -> bytes:
    """An error reply; its first word is the error's kind (``ERR``, ``NOAUTH``, ``WRONGPASS``)."""
    return b"-" + text.replace("\r", " ").replace("\n", " ").encode() + b"\r\n"


def integer(value: int) -> bytes:
    return b":%d\r\n" % value


def nil(proto: int) -> bytes:
    return NIL3 if proto == 3 else NIL2


def bulk(value: bytes | None, proto: int = 2) -> bytes:
    if value is None:
        return NIL3 if proto == 3 else NIL2
    return b"$%d\r\n%s\r\n" % (len(value), value)


def array(items: Iterable[bytes | None], proto: int = 2) -> bytes:
    """An array of bulks (``None``: a nil in its place)."""
    nil_reply = NIL3 if proto == 3 else NIL2
    parts = [b"$%d\r\n%s\r\n" % (len(item), item) if item is not None else nil_reply for item in items]
    return b"*%d\r\n%s" % (len(parts), b"".join(parts))


def map_reply(pairs: Mapping[bytes, bytes], proto: int) -> bytes:
    """A map of already encoded replies by key: RESP3's map, or RESP2's flat array of pairs."""
    body = b"".join(bulk(key) + value for key, value in pairs.items())
    head = b"%%%d\r\n" % len(pairs) if proto == 3 else b"*%d\r\n" % (2 * len(pairs))
    return head + body
