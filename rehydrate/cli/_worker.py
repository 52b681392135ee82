"""``rehydrate worker MODULE:ATTR``: serve a user's scheduler until told to stop.

Signals: the first SIGTERM or SIGINT stops claiming and gives running handlers the scheduler's
grace period (unfinished elements are handed back to the store), then the process exits 0. A
second signal exits at once, status ``128 + signal``: the leases of whatever was running bring it
back to another worker.

``--processes N`` runs N such workers as child processes sharing the store, each in its own
process group (so a terminal's Ctrl-C reaches only the parent, which forwards it once per child),
and restarts a child that dies on its own, with backoff.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import subprocess
import sys
import time
from typing import Any, Final

import anyio
import anyio.abc
import structlog

from rehydrate._scheduler import Scheduler
from rehydrate.cli._common import CLIError
from rehydrate.stores import MemoryStore

logger = structlog.get_logger("rehydrate.worker")

_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)
#: A child that lived this long before dying is restarted at once, not after a growing backoff.
_HEALTHY_RUN: Final = 60.0
_RESTART_BACKOFF: Final = (0.5, 30.0)


def load_target(target: str) -> Scheduler:
    """Import ``MODULE:ATTR`` and return the scheduler it is, or that calling it returns."""
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
    scheduler = load_target(args.target)
    scheduler._override(store=args.store, concurrency=args.concurrency)
    if args.grace is not None:
        scheduler.grace = args.grace
    if args.processes > 1:
        if isinstance(scheduler.store, MemoryStore):
            raise CLIError(
                "--processes needs a store the processes can share: the memory store lives in one "
                "process (use --store sqlite:///path.db or redis://host:6379/0)"
            )
        return anyio.run(_supervise, args, backend=args.backend)
    return anyio.run(_serve, scheduler, backend=args.backend)


async def _serve(scheduler: Scheduler) -> int:
    log = logger.bind(pid=os.getpid())
    signals_seen: list[int] = []

    async def watch(signals: Any) -> None:
        async for signum in signals:
            signals_seen.append(signum)
            if len(signals_seen) == 1:
                log.info("stopping", signal=signal.Signals(signum).name, grace=scheduler.grace)
                scheduler.stop()
            else:
                log.warning(
                    "exiting at once; leases will bring unfinished elements back",
                    signal=signal.Signals(signum).name,
                )
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(128 + signum)

    with anyio.open_signal_receiver(*_SIGNALS) as signals:
        async with anyio.create_task_group() as tg:

            async def serve(*, task_status: anyio.abc.TaskStatus[None]) -> None:
                await scheduler.run(task_status=task_status)
                tg.cancel_scope.cancel()  # stopped: the signal watcher is done too

            tg.start_soon(watch, signals)
            await tg.start(serve)  # raises if the store cannot be opened
            log.info("worker ready", store=repr(scheduler.store), handlers=scheduler.handlers)
    stats = scheduler.stats()
    log.info(
        "worker stopped",
        delivered=stats.delivered,
        acked=stats.acked,
        retried=stats.retried,
        dead_lettered=stats.dead_lettered,
    )
    return 0


def _child_command(args: argparse.Namespace) -> list[str]:
    command = [sys.executable, "-m", "rehydrate", "--log-format", args.log_format]
    if args.verbosity > 0:
        command.append("-" + "v" * args.verbosity)
    elif args.verbosity < 0:
        command.append("-" + "q" * -args.verbosity)
    command += ["worker", args.target, "--processes", "1", "--backend", args.backend]
    if args.store:
        command += ["--store", args.store]
    if args.concurrency is not None:
        command += ["--concurrency", str(args.concurrency)]
    if args.grace is not None:
        command += ["--grace", repr(args.grace)]
    return command


async def _supervise(args: argparse.Namespace) -> int:
    """Run ``args.processes`` workers; forward signals; restart the ones that die on their own."""
    command = _child_command(args)
    children: dict[int, anyio.abc.Process] = {}
    stopping = anyio.Event()
    codes: list[int] = []
    log = logger.bind(pid=os.getpid())

    async def child(slot: int) -> None:
        backoff = _RESTART_BACKOFF[0]
        while not stopping.is_set():
            started = time.monotonic()
            async with await anyio.open_process(
                command, stdin=subprocess.DEVNULL, stdout=None, stderr=None, start_new_session=True
            ) as process:
                children[slot] = process
                log.info("worker process started", slot=slot, child=process.pid)
                code = await process.wait()
                children.pop(slot, None)
            if stopping.is_set() or code == 0:
                codes.append(code)  # asked to stop (by us, or by someone signalling the child)
                return
            if time.monotonic() - started > _HEALTHY_RUN:
                backoff = _RESTART_BACKOFF[0]
            log.error(
                "worker process died; restarting", slot=slot, child=process.pid, code=code, after=backoff
            )
            with anyio.move_on_after(backoff):
                await stopping.wait()
            backoff = min(backoff * 2, _RESTART_BACKOFF[1])

    def forward(signum: signal.Signals) -> None:
        for process in list(children.values()):
            if process.returncode is None:
                process.send_signal(signum)

    async def watch(signals: Any) -> None:
        async for signum in signals:
            log.info("forwarding to workers", signal=signal.Signals(signum).name, workers=len(children))
            stopping.set()
            forward(signal.Signals(signum))

    with anyio.open_signal_receiver(*_SIGNALS) as signals:
        async with anyio.create_task_group() as tg:
            tg.start_soon(watch, signals)
            async with anyio.create_task_group() as workers:
                for slot in range(args.processes):
                    workers.start_soon(child, slot)
            tg.cancel_scope.cancel()
    failed = [code for code in codes if code != 0]
    log.info("workers stopped", codes=codes)
    return failed[0] if failed and failed[0] > 0 else (1 if failed else 0)
