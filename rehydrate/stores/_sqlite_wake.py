"""Wake-up datagrams between the processes that share a SQLite file.

SQLite cannot tell another process that a row changed, so subscriptions in other processes used to
notice a write only by reading the name's counter row every ``nap`` (50 ms). Processes that share a
file share a machine, so they can share a directory of Unix datagram sockets beside it:

* ``<database>-wake/`` holds one socket per waiting subscription, named ``<tag>.<random>``, where
  the tag is the CRC-32 of the dehydrator's name: a writer wakes only the subscribers of the
  names it bumped, found by one ``listdir``, with no registry to keep consistent.
* A writer whose committed transaction bumped a name's counter sends each of them one datagram
  holding the new counter and the name (:func:`notify`). Sending is non-blocking and never fails
  the write: a full buffer means a wake-up is already pending, a vanished file means the
  subscriber left, and a refused send means its process died without removing its socket (it was
  SIGKILLed), so the writer removes the file. A subscription starting up removes such files of its
  name too, so they cannot pile up where nobody writes.
* ``<database>-wake/lock/`` holds one socket per writer waiting for SQLite's write lock
  (:class:`LockWaiter`), for as long as it waits; every write transaction, once it has ended,
  sends each an empty datagram (:func:`hand_over`), so that the lock goes to a waiter rather than
  to whoever happens to try next.

Why datagram sockets, rather than the alternatives (``docs/stores-design-history.md``): a FIFO
wakes one reader per byte and blocks or fails a writer when no reader has it open; inotify is
Linux-only, needs a file that every write touches (an extra write per commit) and a watch per
process; a stream socket needs a listener, accepts and connection state. A datagram is one
non-blocking ``sendto`` per subscriber, needs no connection, and is delivered or refused at once.

This module imports neither anyio nor asyncio: the store calls :func:`notify` in its worker thread
after the commit, and plain synchronous code (a one-shot command) can call it just the same.
Nothing here is needed for correctness: the counter row stays the truth, and a subscription still
reads it every ``nap`` in case a datagram could not be sent (no ``AF_UNIX``, a directory it may not
write, a writer of an older version).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import struct
import sys
import zlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    import socket

__all__ = ["MAX_SUBSCRIBERS", "Listener", "LockWaiter", "directory", "hand_over", "notify", "send", "tidy"]

#: Beside ``jobs.db``, ``jobs.db-wake/`` (as SQLite's own ``jobs.db-wal`` and ``jobs.db-shm``).
_SUFFIX: Final = "-wake"
#: The longest socket address ``bind``/``sendto`` take (``sun_path`` less its NUL): 108 on Linux,
#: 104 on the BSDs and macOS.
_MAX_ADDRESS: Final = 107 if sys.platform.startswith("linux") else 103
#: The most sockets one name may have: beyond it a subscription naps instead (a writer's work per
#: bump is bounded by it).
MAX_SUBSCRIBERS: Final = 256
_TAG_LENGTH: Final = 8
#: The sockets of writers waiting for the write lock, ``<database>-wake/lock/`` (:class:`LockWaiter`):
#: a directory of their own, so that a commit with nobody waiting pays one failed ``listdir``.
_LOCK_DIRECTORY: Final = "lock"
#: A datagram: the name's new counter (8 bytes, big-endian) then the name in UTF-8. A name too
#: long to send (``EMSGSIZE``, beyond the socket buffer) or to receive whole is left to the nap,
#: or to a read of the counter row.
_COUNTER: Final = struct.Struct(">q")
_RECEIVE: Final = 65536
#: Every POSIX Python has ``AF_UNIX``. (``socket`` itself is imported only to bind or send: a
#: one-shot command that finds nobody to wake never pays for its import.)
_AVAILABLE: Final = os.name == "posix"


def directory(database: str) -> str | None:
    """The wake-up directory of a database file, ``None`` where there is none to have.

    ``:memory:`` is private to its connection, and a platform without ``AF_UNIX`` sockets (Windows)
    keeps the nap. The path is resolved (``realpath``), so that two processes naming one file by
    two paths meet in one directory.
    """
    if not _AVAILABLE or database == ":memory:":
        return None
    return os.path.realpath(database) + _SUFFIX


def tag(name: str) -> str:
    """A name's socket prefix: its CRC-32 (a collision only costs a datagram, which the subscriber
    drops: the datagram names the name)."""
    return f"{zlib.crc32(name.encode('utf-8', 'surrogatepass')):08x}"


def _encode(name: str, counter: int) -> bytes:
    return _COUNTER.pack(counter) + name.encode("utf-8", "surrogatepass")


def _decode(datagram: bytes) -> tuple[str, int] | None:
    if len(datagram) < _COUNTER.size:
        return None
    (counter,) = _COUNTER.unpack_from(datagram)
    try:
        return datagram[_COUNTER.size :].decode("utf-8", "surrogatepass"), counter
    except UnicodeDecodeError:
        return None


def _address(path: str, dirfd: int | None) -> str | None:
    """Where to bind or send for a socket file: its path if short enough, else (on Linux) the same
    file reached through an open descriptor of its directory, ``/proc/self/fd/N/<file>``."""
    if len(os.fsencode(path)) <= _MAX_ADDRESS:
        return path
    if dirfd is None:
        return None
    return f"/proc/self/fd/{dirfd}/{os.path.basename(path)}"


def _open_dir(path: str) -> int | None:
    """A descriptor of the directory, for addresses too long to name it (Linux only)."""
    if not sys.platform.startswith("linux") or not os.path.isdir("/proc/self/fd"):
        return None
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def notify(database: str, counters: Mapping[str, int]) -> int:
    """Wake every subscriber of the names in ``counters`` (name -> its counter after the bump).

    Call it after the transaction that bumped the counters has committed (a subscriber woken
    earlier would read the old counter). Synchronous, non-blocking, and it never raises: a wake-up
    that cannot be sent is noticed at the subscriber's next nap. Returns how many were sent.
    """
    return send(directory(database), counters)


def send(where: str | None, counters: Mapping[str, int]) -> int:
    """:func:`notify` for a wake-up directory already found by :func:`directory`."""
    if where is None or not counters:
        return 0
    try:
        entries = os.listdir(where)
    except OSError:  # no directory: nobody has ever waited on this file (or it is not ours to read)
        return 0
    tags = {tag(name): name for name in counters}
    targets = [entry for entry in entries if entry[:_TAG_LENGTH] in tags]
    datagrams = {name: _encode(name, counter) for name, counter in counters.items()}
    return _send_each(
        where, targets[: MAX_SUBSCRIBERS * len(tags)], lambda entry: datagrams[tags[entry[:_TAG_LENGTH]]]
    )


def hand_over(where: str | None) -> int:
    """Wake every writer of another process (or connection) waiting for the write lock.

    Call it once a write transaction has ended (committed or rolled back): the lock is free.
    Synchronous, non-blocking, and it never raises; where nobody waits it costs one failed
    ``listdir``. Returns how many were woken.
    """
    if where is None:
        return 0
    lock = os.path.join(where, _LOCK_DIRECTORY)
    try:
        entries = os.listdir(lock)
    except OSError:  # nobody waits (the usual case), or not ours to read
        return 0
    return _send_each(lock, entries, lambda entry: b"")


def _send_each(where: str, entries: list[str], datagram: Callable[[str], bytes]) -> int:
    """Send ``datagram(entry)`` to each socket file of ``where``; how many were sent. Never raises."""
    if not entries:
        return 0
    import socket

    sent = 0
    dirfd: int | None = None
    try:
        # A socket per call, not one kept per process: nothing left open at exit, and a call
        # that finds somebody to wake has a commit behind it, far dearer than a socket().
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    except OSError:  # out of descriptors: the naps will notice
        return 0
    try:
        sender.setblocking(False)
        for entry in entries:
            path = os.path.join(where, entry)
            if len(os.fsencode(path)) > _MAX_ADDRESS and dirfd is None:
                dirfd = _open_dir(where)
            address = _address(path, dirfd)
            if address is None:
                continue
            try:
                sender.sendto(datagram(entry), address)
                sent += 1
            except ConnectionRefusedError:  # nobody bound: its process died without cleaning up
                _remove_stale(path)
            except OSError:
                # EAGAIN: its buffer is full, so a wake-up is already waiting there; ENOENT: it
                # just left; EACCES/EPERM: not ours to wake. None may fail the write.
                pass
    finally:
        sender.close()
        if dirfd is not None:
            os.close(dirfd)
    return sent


def _remove_stale(path: str) -> None:
    """Remove a dead subscriber's socket file (only a socket: never anything else found there)."""
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)


class Listener:
    """One subscription's socket in the wake-up directory. Blocking calls: use from a worker thread,
    except :meth:`receive`, which never blocks."""

    def __init__(self, sock: socket.socket, path: str, directory: str) -> None:
        self.socket = sock
        self.path = path
        self._directory = directory

    @classmethod
    def bind(cls, where: str | None, name: str) -> Listener | None:
        """A bound, non-blocking socket for ``name``'s wake-ups in the wake-up directory ``where``
        (from :func:`directory`), or ``None``: then the subscription naps."""
        if where is None:
            return None
        prefix = tag(name)
        for _ in range(3):  # the directory may be removed by a last leaver between mkdir and bind
            try:
                _make_directory(where, os.path.dirname(where))
                if _sweep(where, prefix) >= MAX_SUBSCRIBERS:
                    return None
                return cls._bind_in(where, prefix)
            except FileNotFoundError:
                continue
            except OSError:  # read-only or foreign directory, descriptors exhausted...: nap instead
                return None
        return None

    @classmethod
    def _bind_in(cls, where: str, prefix: str) -> Listener | None:
        bound = _bind(where, f"{prefix}.{os.urandom(4).hex()}")
        return None if bound is None else cls(bound[0], bound[1], where)

    def receive(self) -> list[tuple[str, int] | None]:
        """Every datagram waiting, as (name, counter), ``None`` for one that could not be read
        (cut short, or not ours): its subscriber reads the counter row instead. Never blocks."""
        out: list[tuple[str, int] | None] = []
        while True:
            try:
                datagram = self.socket.recv(_RECEIVE)
            except (BlockingIOError, InterruptedError):
                return out
            except OSError:  # closed under us
                return out
            out.append(_decode(datagram))

    def close(self) -> None:
        """Close the socket, remove its file, and the directory if it is left empty."""
        self.socket.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        tidy(self._directory)


class LockWaiter:
    """A writer waiting for the write lock, woken by the writer that frees it (:func:`hand_over`).

    SQLite only lets a writer that finds the lock taken try again later. Trying again after
    pauses, a worker's claim lost the race to a producer that committed and began its next push
    a tenth of a millisecond later, pause after pause, and a claim could wait behind dozens of
    pushes (``bench_workers.py --store sqlite --enqueue one``). A waiter binds a socket in
    ``<database>-wake/lock/`` for as long as it waits; whoever ends a write transaction sends a
    datagram to each socket there, so the waiter tries again at once, usually before the writer
    that freed the lock begins again. The pauses remain the bound of each wait: a writer that
    sends nothing (the ``sqlite3`` shell, an older version) is still waited out. Blocking: call it
    from a worker thread.
    """

    def __init__(self, sock: socket.socket, path: str) -> None:
        self._socket = sock
        self._path = path

    @classmethod
    def bind(cls, where: str | None) -> LockWaiter | None:
        """A waiter in the wake-up directory ``where`` (from :func:`directory`), or ``None``: then
        the writer pauses unwoken, as it did before."""
        if where is None:
            return None
        lock = os.path.join(where, _LOCK_DIRECTORY)
        for _ in range(3):  # a last leaver may remove the directories between mkdir and bind
            try:
                _make_directory(where, os.path.dirname(where))
                _make_directory(lock, where)
                bound = _bind(lock, os.urandom(4).hex())
                return None if bound is None else cls(*bound)
            except FileNotFoundError:
                continue
            except OSError:  # read-only or foreign directory, descriptors exhausted...: pause instead
                return None
        return None

    def wait(self, timeout: float) -> None:
        """Return once a writer has freed the lock, or after ``timeout`` seconds."""
        sock = self._socket
        try:
            sock.settimeout(timeout)  # a wait in poll(), for any descriptor number
            sock.recv(16)
        except OSError:  # TimeoutError: nobody handed the lock over (a foreign writer, or a race)
            pass
        sock.setblocking(False)
        try:
            while True:  # hand-overs that came together make one wake-up
                sock.recv(16)
        except OSError:
            pass

    def close(self) -> None:
        """Close the socket and remove its file. The directories stay for the next wait (making
        and removing them costs more than a wait on a quiet disk); :func:`tidy` removes them."""
        self._socket.close()
        with contextlib.suppress(OSError):
            os.unlink(self._path)


def tidy(where: str | None) -> None:
    """Remove the wake-up directory (and its ``lock/``) if nobody uses it any more; never raises.

    A store calls it when it closes, a subscription when it leaves: the last one out leaves
    nothing beside the database.
    """
    if where is None:
        return
    with contextlib.suppress(OSError):  # not empty (a writer waits), or gone: both fine
        os.rmdir(os.path.join(where, _LOCK_DIRECTORY))
    with contextlib.suppress(OSError):  # not empty (a subscription waits), or gone: both fine
        os.rmdir(where)


def _make_directory(where: str, parent: str) -> None:
    """Create the directory with the database directory's permissions (not this process's umask)."""
    try:
        os.mkdir(where)
    except FileExistsError:
        return
    with contextlib.suppress(OSError):
        os.chmod(where, stat.S_IMODE(os.stat(parent).st_mode))


def _bind(where: str, filename: str) -> tuple[socket.socket, str] | None:
    """A non-blocking datagram socket bound to the file ``filename`` in ``where``, and its path;
    ``None`` where its address cannot be named. Whoever may create files beside the database may
    send to it."""
    import socket

    path = os.path.join(where, filename)
    dirfd = _open_dir(where) if len(os.fsencode(path)) > _MAX_ADDRESS else None
    try:
        address = _address(path, dirfd)
        if address is None:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(address)
            os.chmod(path, stat.S_IMODE(os.stat(where).st_mode) & 0o666)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            with contextlib.suppress(OSError):
                os.unlink(path)
            raise
    finally:
        if dirfd is not None:
            os.close(dirfd)
    return sock, path


def _sweep(where: str, prefix: str) -> int:
    """Remove the sockets of ``prefix`` whose process is gone; how many live ones remain."""
    import socket

    live = 0
    dirfd: int | None = None
    try:
        for entry in os.listdir(where):
            if entry[:_TAG_LENGTH] != prefix:
                continue
            path = os.path.join(where, entry)
            if len(os.fsencode(path)) > _MAX_ADDRESS and dirfd is None:
                dirfd = _open_dir(where)
            address = _address(path, dirfd)
            if address is None:
                live += 1
                continue
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                probe.connect(address)  # a datagram socket's connect sends nothing: no spurious wake
                live += 1
            except ConnectionRefusedError:
                _remove_stale(path)
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    live += 1
            finally:
                probe.close()
    finally:
        if dirfd is not None:
            os.close(dirfd)
    return live
