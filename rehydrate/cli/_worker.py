"""``rehydrate worker MODULE:ATTR``: serve a user's scheduler until told to stop.

The store: ``--store URL``, else ``$REHYDRATE_STORE``, else the scheduler's own. A worker serving
the memory store says in a warning that nothing outside its process can reach it.

Signals: the first SIGTERM, SIGINT or SIGHUP (the terminal closed) stops claiming and gives running
handlers the scheduler's grace period (unfinished elements are handed back to the store), then the
process exits 0. A second signal exits at once, status ``128 + signal``: the leases of whatever was
running bring it back to another worker.

``--processes N`` runs N such workers as child processes sharing the store, each in its own
process group (so a terminal's Ctrl-C reaches only the parent, which forwards it once per child),
and restarts a child that dies on its own, with backoff. Children stop with their supervisor however
it ends: on Linux the kernel sends them SIGTERM when it dies (``PR_SET_PDEATHSIG``), and everywhere
they watch a pipe whose only write end the supervisor holds (end of file: it is gone). A child that
fails before serving (the store cannot be opened, the module does not import) three times in a row
while no other child serves makes the supervisor stop and exit 1 with that child's error, as a
single worker would.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.util
import os
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, Final, TextIO, cast

import attrs

from rehydrate.cli._common import (
    STORE_ENV,
    CLIError,
    configure_logging,
    duration,
    error_message,
    person_error,
    port,
    positive_int,
    seconds_text,
)
from rehydrate.cli._parser import Commands
from rehydrate.errors import StoreUnavailableError

if TYPE_CHECKING:  # the scheduler, the event loop and structlog are imported by run(), not by --help
    import socket
    import subprocess

    import anyio
    import anyio.abc

    from rehydrate._scheduler import Scheduler
    from rehydrate.abc import Store

#: SIGHUP is what a closing terminal sends: stop gracefully, as for SIGTERM.
_SIGNALS: Final = tuple(
    sig for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None)) if sig is not None
)
#: A child that lived this long before dying is restarted after the shortest backoff again.
_HEALTHY_RUN: Final = 60.0
_RESTART_BACKOFF: Final = (0.5, 30.0)
#: A child that fails before serving this many times in a row, with no other child serving, makes
#: the supervisor give up: the store or the module is wrong, and restarting will not fix it.
_START_ATTEMPTS: Final = 3
#: The pause between two attempts to open the store: doubling from the first to the second, each
#: with up to a quarter off at random so that the workers of a fleet do not all come back at once.
_WAIT_BACKOFF: Final = (0.2, 5.0)
#: How the supervisor tells a child it is supervised: ``<supervisor pid>:<watch fd>:<status fd>``.
#: Read and removed by the child, so that processes its handlers start do not inherit it.
_SUPERVISOR_ENV: Final = "_REHYDRATE_SUPERVISOR"
_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


def _logger() -> Any:
    """The worker's logger: structlog is imported when the worker runs, not when --help is built."""
    import structlog

    return structlog.get_logger("rehydrate.worker")


def load_target(target: str) -> Scheduler:
    """Import ``MODULE:ATTR`` and return the scheduler it is, or that calling it returns."""
    from rehydrate._scheduler import Scheduler

    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise CLIError(f"invalid worker target {target!r}: use MODULE:ATTR, e.g. myapp.tasks:scheduler")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the current directory's modules import
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            raise CLIError(
                f"module {module_name!r} not found (from {target!r}; sys.path[0] is {sys.path[0]!r})"
            ) from None
        raise CLIError(f"importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:
        raise CLIError(f"importing {module_name!r} failed: {type(exc).__name__}: {exc}") from exc
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise CLIError(f"{module_name!r} has no attribute {attr!r}") from None
    if not isinstance(obj, Scheduler) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise CLIError(f"calling {target} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(obj, Scheduler):
        raise CLIError(
            f"{target} is a {type(obj).__name__}, not a rehydrate.Scheduler (or a function making one)"
        )
    if not obj.handlers:
        raise CLIError(f"{target} has no handlers: register them with @scheduler.handler(name)")
    return obj


def run(args: argparse.Namespace) -> int:
    # Logs that cannot be written (the terminal closed: EIO; a reader gone: EPIPE) must not turn
    # the graceful stop that follows a hang-up into a crash.
    configure_logging(args.log_format, args.verbosity, stream=cast(TextIO, _Tolerant(sys.stderr)))
    supervisor = _Supervisor.from_environment()
    if supervisor is not None and not supervisor.follow():
        return 0  # the supervisor died while this process started: nobody wants it any more
    try:
        return _run(args, supervisor)
    except BaseException as exc:
        if supervisor is None or supervisor.served:
            raise
        # Failed before serving: tell the supervisor why (it decides whether to give up and says
        # it in one line), rather than print the same line once per attempt.
        mistake = person_error(exc)
        if mistake is None:
            raise  # a bug: keep its traceback
        supervisor.report(f"error {error_message(mistake)}")
        return 1


def _run(args: argparse.Namespace, supervisor: _Supervisor | None) -> int:
    import anyio

    if args.backend == "trio" and importlib.util.find_spec("trio") is None:
        raise CLIError("--backend trio needs trio: pip install 'rehydrate[trio]'")
    scheduler = load_target(args.target)
    url, source = _store_choice(args)
    if url is not None:
        scheduler.use_store(url)
    if args.concurrency is not None:
        scheduler.set_concurrency(args.concurrency)
    if args.grace is not None:
        scheduler.grace = args.grace
    if args.heartbeat is not None:
        scheduler.heartbeat = args.heartbeat
    if args.metrics_port is not None and args.metrics_port + args.processes - 1 > 65535:
        raise CLIError(
            f"--metrics-port {args.metrics_port} leaves no port for each of {args.processes} processes"
        )
    if scheduler.store.capabilities.in_process:  # (the memory store: no other process reaches it)
        if args.processes > 1:
            raise CLIError(
                "--processes needs a store the processes can share: the memory store lives in one "
                f"process (use --store sqlite:///path.db or redis://host:6379/0, or set {STORE_ENV})"
            )
        named = os.environ.get(STORE_ENV, "")
        _logger().warning(
            "serving the memory store: nothing outside this process can reach it "
            f"(rehydrate push, other processes); give --store or set {STORE_ENV}",
            store_from=source,
            **({STORE_ENV: _scheme(named)} if named and not named.startswith("memory:") else {}),
        )
    if args.processes > 1:
        return anyio.run(_supervise, args, backend=args.backend)
    listener = _metrics_listener(args) if args.metrics_port is not None else None
    return anyio.run(
        _serve, scheduler, source, supervisor, listener, args.backend, args.wait, backend=args.backend
    )


def _metrics_listener(args: argparse.Namespace) -> socket.socket:
    """The metrics port, bound before anything runs: a missing extra or a busy port is one line."""
    for module in ("prometheus_client", "hypercorn"):
        if importlib.util.find_spec(module) is None:
            raise CLIError(f"--metrics-port needs {module}: pip install 'rehydrate[web]'")
    from rehydrate.web._worker_metrics import listen

    try:
        return listen(args.metrics_host, args.metrics_port)
    except OSError as exc:
        raise CLIError(
            f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {exc.strerror or exc}"
        ) from None


def _store_choice(args: argparse.Namespace) -> tuple[str | None, str]:
    """The URL that overrides the scheduler's own store (``None``: keep it), and where it is from."""
    if args.store:
        return args.store, "--store"
    from_env = os.environ.get(STORE_ENV)
    if from_env:
        return from_env, STORE_ENV
    return None, "the module"


def _scheme(url: str) -> str:
    """Enough of a URL to name the store, without a password that may follow."""
    return url.split("://", 1)[0] + "://..." if "://" in url else "(not a URL)"


def settle_heap() -> None:
    """Collect once and freeze what start-up left, before the first claim.

    Start-up (the application's modules, the event loop's, the store's client) leaves tens of
    thousands of objects the collector tracks (about 60,000 in a Redis worker) and has never
    examined as old: more than the quarter of the old generation that lets a full collection
    run, so one runs as soon as the middle generation has been collected ten times more, a few
    seconds into serving, and stops the event loop while it walks them all (tens of
    milliseconds; every element due meanwhile waits). Collected and frozen here, they are never walked
    again, and no full collection is due until a quarter as many objects again have survived.
    """
    gc.collect()
    gc.freeze()


async def open_waiting(
    store: Store, wait: float, stop: anyio.Event, log: Any, *, backoff: tuple[float, float] = _WAIT_BACKOFF
) -> bool:
    """Open ``store``, trying again for up to ``wait`` seconds while it cannot be reached.

    One warning line per failed attempt says why and when the next comes. Only an error that
    says the backend did not answer (:attr:`StoreUnavailableError.transient`) is waited out: a
    refused password or a database that does not exist fails at once, however long ``wait``.
    Past ``wait`` the last error is raised, saying how long it was waited for. False if ``stop``
    was set meanwhile (a signal): the store is not open, and nothing is to be served.
    """
    import random

    import anyio

    deadline = anyio.current_time() + wait
    delay, attempt = backoff[0], 1
    while True:
        try:
            await store.open()
        except StoreUnavailableError as exc:
            left = deadline - anyio.current_time()
            if not exc.transient or wait <= 0:
                raise
            if left <= 0:
                raise StoreUnavailableError(
                    f"{exc} (still unavailable after waiting {seconds_text(wait)}: --wait sets how long)",
                    transient=True,
                ) from exc
            pause = min(delay * random.uniform(0.75, 1.0), left)
            log.warning(
                "store unavailable; retrying",
                attempt=attempt,
                retry_in=round(pause, 2),
                gives_up_in=round(left, 1),
                error=str(exc),
            )
            with anyio.move_on_after(pause):
                await stop.wait()
            if stop.is_set():
                return False
            delay, attempt = min(delay * 2, backoff[1]), attempt + 1
        else:
            if attempt > 1:
                log.info("store available", attempts=attempt)
            return True


async def _serve(
    scheduler: Scheduler,
    source: str,
    supervisor: _Supervisor | None,
    listener: socket.socket | None = None,
    backend: str = "asyncio",
    wait: float = 0.0,
) -> int:
    import anyio

    log = _logger().bind(pid=os.getpid())
    signals_seen: list[int] = []
    #: Set by the first signal: a worker still waiting for its store stops waiting.
    stopping = anyio.Event()
    #: Whether the store was opened (False: stopped by a signal while waiting for it).
    opened: list[bool] = []

    async def watch(signals: Any) -> None:
        # Linux sends one SIGTERM when the supervisor dies: after a signal it forwarded, that
        # notice is not a second signal (which would exit at once).
        notice_from = supervisor.pid if supervisor and sys.platform.startswith("linux") else None
        async for signum in signals:
            if notice_from is not None and signum == signal.SIGTERM and os.getppid() != notice_from:
                notice_from = None
                if signals_seen:
                    continue
            signals_seen.append(signum)
            if len(signals_seen) == 1:
                log.info("stopping", signal=signal.Signals(signum).name, grace=scheduler.grace)
                stopping.set()
                scheduler.stop()
            else:
                log.warning(
                    "exiting at once; leases will bring unfinished elements back",
                    signal=signal.Signals(signum).name,
                )
                with contextlib.suppress(OSError):
                    sys.stdout.flush()
                    sys.stderr.flush()
                os._exit(128 + signum)

    async def watch_supervisor(supervisor: _Supervisor) -> None:
        await supervisor.gone()
        if not signals_seen:
            log.warning("supervisor gone; stopping", supervisor=supervisor.pid, grace=scheduler.grace)
        scheduler.stop()

    with anyio.open_signal_receiver(*_SIGNALS) as signals:
        async with anyio.create_task_group() as tg:

            async def serve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                # The worker runs the scheduler, so it owns the store's lifetime: a scheduler opens
                # a store object it was given but leaves closing it to its owner. Open and close it
                # here, in this one task: a Redis store's connection pool is a task group that must
                # exit in the task that entered it (else: "exit a cancel scope that isn't the
                # current task's", and a context token reset in a different Context). Idempotent
                # for a store the scheduler made from a URL, which closes it itself.
                opened.append(await open_waiting(scheduler.store, wait, stopping, log))
                if not opened[0]:  # signalled while waiting for the store: nothing to serve
                    task_status.started()
                    tg.cancel_scope.cancel()
                    return
                async with scheduler.store:
                    settle_heap()
                    await scheduler.run(task_status=task_status)
                # Stopped: the watchers are done too, and the metrics server, which shuts down
                # gracefully when cancelled (a scraper's open connection closed, not cut).
                tg.cancel_scope.cancel()

            tg.start_soon(watch, signals)
            if listener is not None:
                from rehydrate.web._worker_metrics import serve as serve_metrics

                host, port = listener.getsockname()[:2]
                tg.start_soon(serve_metrics, scheduler, listener, backend)
                shown = f"[{host}]" if ":" in host else host
                log.info("metrics listening", url=f"http://{shown}:{port}/metrics")
            await tg.start(serve)  # raises if the store cannot be opened
            if not opened[0]:
                log.info("stopped before the store could be opened")
                return 0
            if signals_seen:
                # Signalled while starting: a scheduler that was not running yet forgets a stop()
                # when it starts (found by a child signalled before it served), so say it again.
                scheduler.stop()
            log.info(
                "worker ready", store=repr(scheduler.store), store_from=source, handlers=scheduler.handlers
            )
            if supervisor is not None:
                supervisor.report("ready")
                tg.start_soon(watch_supervisor, supervisor)
    stats = scheduler.stats()
    log.info(
        "worker stopped",
        delivered=stats.delivered,
        acked=stats.acked,
        retried=stats.retried,
        dead_lettered=stats.dead_lettered,
    )
    return 0


class _Tolerant:
    """A log stream that goes quiet, rather than raise, once it cannot be written to."""

    def __init__(self, stream: TextIO) -> None:
        self._stream: TextIO | None = stream

    def write(self, text: str) -> int:
        if self._stream is not None:
            try:
                self._stream.write(text)
            except OSError:
                self._stream = None
        return len(text)

    def flush(self) -> None:
        if self._stream is not None:
            try:
                self._stream.flush()
            except OSError:
                self._stream = None

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()


# -- the child's side of supervision -----------------------------------------------------------


@attrs.define
class _Supervisor:
    """What a child worker knows of the ``--processes`` supervisor that started it."""

    pid: int
    #: The read end of a pipe whose write end only the supervisor holds: end of file, it is gone.
    watch_fd: int
    #: Where the child says ``ready`` once serving, or ``error <line>`` if it could not start.
    status_fd: int | None
    served: bool = False

    @classmethod
    def from_environment(cls) -> _Supervisor | None:
        value = os.environ.pop(_SUPERVISOR_ENV, None)
        if not value:
            return None
        try:
            pid, watch_fd, status_fd = (int(part) for part in value.split(":"))
        except ValueError:
            raise CLIError(f"{_SUPERVISOR_ENV}={value!r} is not <pid>:<fd>:<fd>") from None
        for fd in (watch_fd, status_fd):
            os.set_inheritable(fd, False)  # not for what the handlers start
        return cls(pid, watch_fd, status_fd)

    def follow(self) -> bool:
        """Ask Linux for SIGTERM when the supervisor dies; False if it already has.

        The check after the request closes the race: a supervisor that died before it was made
        has already handed this process to another parent, and no signal will come.
        """
        if sys.platform.startswith("linux"):
            import ctypes

            try:
                libc = ctypes.CDLL(None, use_errno=True)
                libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
            except (OSError, AttributeError):  # pragma: no cover - no prctl: the pipe still tells
                pass
        return os.getppid() == self.pid

    def report(self, status: str) -> None:
        """Tell the supervisor once how start-up went (it may be gone: then nobody needs to know)."""
        fd, self.status_fd = self.status_fd, None
        if fd is None:
            return
        self.served = status == "ready"
        try:
            os.write(fd, status.encode("utf-8", "replace")[:4000] + b"\n")
        except OSError:
            pass
        finally:
            os.close(fd)

    async def gone(self) -> None:
        """Return once the supervisor has ended, however it ended."""
        import anyio

        while True:
            await anyio.wait_readable(self.watch_fd)
            try:
                if not os.read(self.watch_fd, 512):
                    return
            except BlockingIOError:  # pragma: no cover - woken for nothing
                continue


# -- the supervisor ----------------------------------------------------------------------------


def _child_command(args: argparse.Namespace, slot: int = 0) -> list[str]:
    command = [sys.executable, "-m", "rehydrate", "--log-format", args.log_format]
    if args.verbosity > 0:
        command.append("-" + "v" * args.verbosity)
    elif args.verbosity < 0:
        command.append("-" + "q" * -args.verbosity)
    # The store goes by the environment (``_child_environment``), never on the command line,
    # where anyone on the machine could read a password in it with ``ps``.
    command += ["worker", args.target, "--processes", "1", "--backend", args.backend]
    if args.concurrency is not None:
        command += ["--concurrency", str(args.concurrency)]
    if args.grace is not None:
        command += ["--grace", repr(args.grace)]
    if args.heartbeat is not None:
        command += ["--heartbeat", repr(args.heartbeat)]
    command += ["--wait", repr(args.wait)]
    if args.metrics_port is not None:  # a port per process: N, N+1, ... by slot, kept on restart
        command += ["--metrics-port", str(args.metrics_port + slot), "--metrics-host", args.metrics_host]
    return command


@attrs.define
class _Child:
    """One child worker process and what it said about its start-up."""

    process: subprocess.Popen[bytes]
    status_fd: int
    served: bool = False
    error: str | None = None
    _buffer: bytes = b""

    def read_status(self) -> bool:
        """Take what the child wrote so far; False at end of file (or nothing more to come)."""
        while True:
            try:
                data = os.read(self.status_fd, 4096)
            except BlockingIOError:
                return True
            if not data:
                return False
            self._buffer += data
            *lines, self._buffer = self._buffer.split(b"\n")
            for line in lines:
                text = line.decode("utf-8", "replace")
                if text == "ready":
                    self.served = True
                elif text.startswith("error "):
                    self.error = text.removeprefix("error ")


def _child_environment(args: argparse.Namespace) -> dict[str, str]:
    """The children's environment: ours, with ``--store`` (if given) as ``$REHYDRATE_STORE``."""
    env = dict(os.environ)
    if args.store:  # else the children read $REHYDRATE_STORE as this process did
        env[STORE_ENV] = args.store
    return env


def _spawn(command: list[str], env: dict[str, str], watch_fd: int) -> _Child:
    """Start a child worker.

    Synchronously, in this (the event loop's, the main) thread: Linux sends a child's
    ``PR_SET_PDEATHSIG`` when the *thread* that forked it ends, and trio's ``open_process`` forks
    in a worker thread that ends after idling, which would stop a healthy child.
    """
    import subprocess

    status_read, status_write = os.pipe()
    os.set_blocking(status_read, False)
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            pass_fds=(watch_fd, status_write),
            env={**env, _SUPERVISOR_ENV: f"{os.getpid()}:{watch_fd}:{status_write}"},
        )
    except BaseException:
        os.close(status_read)
        raise
    finally:
        os.close(status_write)
    return _Child(process, status_read)


async def _wait(child: _Child) -> int:
    """Wait for the child to exit, taking its status line as it comes; its exit code."""
    import anyio

    process = child.process
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # not Linux 5.3+: a thread waits for it instead
        pidfd = None
    try:
        async with anyio.create_task_group() as tg:

            async def status() -> None:
                while child.read_status():
                    await anyio.wait_readable(child.status_fd)

            tg.start_soon(status)
            if pidfd is not None:
                await anyio.wait_readable(pidfd)
                code = process.wait()  # it has exited: this only reaps it
            else:
                code = await anyio.to_thread.run_sync(process.wait, abandon_on_cancel=True)
            tg.cancel_scope.cancel()
        child.read_status()  # what it wrote just before exiting
        return code
    finally:
        if pidfd is not None:
            os.close(pidfd)
        os.close(child.status_fd)


async def _supervise(args: argparse.Namespace) -> int:
    """Run ``args.processes`` workers; forward signals; restart the ones that die on their own."""
    import anyio

    env = _child_environment(args)
    children: dict[int, _Child] = {}
    stopping = anyio.Event()
    codes: list[int] = []
    given_up: list[str] = []
    log = _logger().bind(pid=os.getpid())
    # The children watch the read end; the write end (not inherited: os.pipe() fds are not) closes
    # only when this process ends, however it ends.
    watch_read, watch_write = os.pipe()

    def serving() -> bool:
        return any(child.served and child.process.returncode is None for child in children.values())

    async def run_slot(slot: int) -> None:
        backoff = _RESTART_BACKOFF[0]
        failed_starts = 0
        while not stopping.is_set():
            started = time.monotonic()
            child = children[slot] = _spawn(_child_command(args, slot), env, watch_read)
            log.info("worker process started", slot=slot, child=child.process.pid)
            code = await _wait(child)
            if stopping.is_set() or code == 0:
                # Asked to stop (by us, or by someone signalling the child). One still starting
                # up (importing the app) when we forwarded the signal dies of it before its
                # handlers are in place: it held no claims, and it stopped as asked.
                if stopping.is_set() and not child.served and -code in forwarded:
                    code = 0
                codes.append(code)
                return
            if child.served:
                failed_starts = 0
                if time.monotonic() - started > _HEALTHY_RUN:
                    backoff = _RESTART_BACKOFF[0]
                log.error(
                    "worker process died; restarting",
                    slot=slot,
                    child=child.process.pid,
                    code=code,
                    after=backoff,
                )
            else:
                failed_starts += 1
                error = child.error or f"a worker process exited with status {code} before serving"
                if failed_starts >= _START_ATTEMPTS and not serving():
                    log.error(
                        "worker process failed to start; giving up",
                        slot=slot,
                        child=child.process.pid,
                        code=code,
                        error=error,
                        attempts=failed_starts,
                    )
                    given_up.append(error)
                    codes.append(code)
                    stopping.set()
                    forward(signal.SIGTERM)
                    return
                log.error(
                    "worker process failed to start; restarting",
                    slot=slot,
                    child=child.process.pid,
                    code=code,
                    error=error,
                    after=backoff,
                )
            with anyio.move_on_after(backoff):
                await stopping.wait()
            backoff = min(backoff * 2, _RESTART_BACKOFF[1])

    #: The signals forwarded to the children (a child that dies of one was stopped, not crashed).
    forwarded: set[int] = set()

    def forward(signum: signal.Signals) -> None:
        forwarded.add(int(signum))
        for child in list(children.values()):
            child.process.send_signal(signum)  # nothing if it has exited

    async def watch(signals: Any) -> None:
        async for signum in signals:
            log.info("forwarding to workers", signal=signal.Signals(signum).name, workers=len(children))
            stopping.set()
            forward(signal.Signals(signum))

    try:
        with anyio.open_signal_receiver(*_SIGNALS) as signals:
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch, signals)
                async with anyio.create_task_group() as workers:
                    for slot in range(args.processes):
                        workers.start_soon(run_slot, slot)
                tg.cancel_scope.cancel()
    finally:
        os.close(watch_write)
        os.close(watch_read)
    log.info("workers stopped", codes=codes)
    if given_up:
        raise CLIError(f"worker processes failed to start {_START_ATTEMPTS} times in a row: {given_up[0]}")
    failed = [code for code in codes if code != 0]
    return failed[0] if failed and failed[0] > 0 else (1 if failed else 0)


# -- the command -------------------------------------------------------------------------------


def register(commands: Commands) -> None:
    """Add ``rehydrate worker``."""
    worker = commands.add(
        "worker",
        "run a scheduler's handlers until SIGTERM/SIGINT/SIGHUP",
        DESCRIPTION,
        EPILOG,
        run,
    )
    worker.add_argument("target", metavar="MODULE:ATTR", help="e.g. myapp.tasks:scheduler")
    worker.add_argument("--store", metavar="URL", help=STORE_HELP)
    worker.add_argument(
        "--concurrency", type=positive_int, metavar="N", help="elements in flight per handler"
    )
    worker.add_argument(
        "--processes", type=positive_int, default=1, metavar="N", help="worker processes (default 1)"
    )
    worker.add_argument(
        "--grace", type=duration, metavar="DURATION", help="shutdown grace (default: the scheduler's)"
    )
    worker.add_argument(
        "--backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="event loop (default asyncio; trio needs pip install 'rehydrate[trio]')",
    )
    worker.add_argument(
        "--heartbeat",
        type=duration,
        metavar="DURATION",
        help="seconds between heartbeats to the store (default: the scheduler's, 5s); expires after 3",
    )
    worker.add_argument(
        "--wait",
        type=duration,
        # A store restarted beside its workers (a compose file, a rolling deploy) is back within
        # a minute; a worker that exited at once would only be restarted into the same failure.
        default=60.0,
        metavar="DURATION",
        help="at start-up, wait this long for a store that cannot be reached, trying again with "
        "backoff (default 1m; 0: fail at once)",
    )
    worker.add_argument(
        "--metrics-port",
        type=port,
        metavar="N",
        help="serve Prometheus metrics on this port (with --processes, child i on N+i)",
    )
    worker.add_argument(
        "--metrics-host", default="127.0.0.1", metavar="HOST", help="where metrics listen (default 127.0.0.1)"
    )


# -- help (shown by `rehydrate worker --help`) ---------------------------------------------------

DESCRIPTION: Final = (
    "Import MODULE:ATTR (a rehydrate.Scheduler, or a function returning one) and serve its\n"
    "handlers until stopped."
)
STORE_HELP: Final = f"the store, instead of the scheduler's own (default: ${STORE_ENV}, else the scheduler's)"
EPILOG: Final = f"""\
store:
  --store URL, else ${STORE_ENV}, else the store the scheduler was built with: either of the
  first two replaces the module's store. A worker serving the memory store warns that nothing
  outside its process (rehydrate push, other workers) can reach it; --processes refuses it.
  A store that cannot be reached at start-up (a Redis restarting beside its workers) is tried
  again with backoff (0.2s doubling to 5s), with one warning line per attempt, for up to --wait
  (default 1m; --wait 0 fails at once); a signal meanwhile stops the worker (exit 0). What
  waiting cannot fix fails at once: a refused password, a database that does not exist, an
  unknown URL scheme.

stopping:
  The first SIGTERM, SIGINT or SIGHUP (the terminal closed) stops claiming and lets running
  handlers finish within the grace period (unfinished elements are handed back), then exits 0.
  A second signal exits at once; the leases of unfinished elements bring them back.

--processes N:
  N child workers, each in a process group of its own; the parent forwards signals to them and
  restarts one that dies after serving, with backoff. Children stop when the parent ends, however
  it ends (SIGKILL included). When a child fails before serving (unreachable store, module that
  does not import) {_START_ATTEMPTS} times in a row and no other child serves, the parent gives up:
  exit 1, with that child's error in one line.

exit status:
  0 stopped by a signal; 1 an error, said in one line (bad module, store unreachable...);
  2 a malformed command line; 128+N exited at once on a second signal N.

heartbeats and metrics:
  The worker registers itself in the store and refreshes a heartbeat every --heartbeat seconds
  (default 5s; it expires after three): 'rehydrate workers' lists the workers alive and expired.
  --metrics-port N serves this process's counters for Prometheus at http://HOST:N/metrics
  (rehydrate_deliveries_total, rehydrate_lateness_seconds...; needs pip install 'rehydrate[web]');
  with --processes, child i serves port N+i. --metrics-host (default 127.0.0.1) sets where it
  listens: 0.0.0.0 for a scraper on another host.
"""
