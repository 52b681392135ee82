"""The machinery the remote stores share (rehydrate/stores/_remote.py): the retry policy, the
server clock's sampling, the integer options. The stores' own tests (test_redis.py,
test_postgres.py) check them in use, against real servers; these check the rules themselves."""

from __future__ import annotations

import anyio
import pytest

from rehydrate._clock import ServerClock
from rehydrate.errors import InvalidArgumentError, InvalidTypeError, StoreUnavailableError
from rehydrate.stores._remote import MAX_PAUSE, Backoff, int_option, set_offset


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_pause_doubles_from_the_first_up_to_the_most() -> None:
    policy = Backoff(retries=10, first=0.1)
    assert [policy.delay(attempt) for attempt in (1, 2, 3, 4)] == pytest.approx([0.1, 0.2, 0.4, 0.8])
    assert policy.delay(5) == pytest.approx(1.6)
    assert policy.delay(6) == MAX_PAUSE == 2.0
    assert policy.delay(60) == MAX_PAUSE
    assert Backoff(retries=3, first=0.0).delay(3) == 0.0


def _unavailable(exc: BaseException, attempts: int) -> StoreUnavailableError:
    return StoreUnavailableError(f"gone after {attempts} attempts: {exc}")


@pytest.mark.anyio
async def test_retries_then_gives_up_with_the_stores_error() -> None:
    """``retries`` pauses, each giving the next attempt's number; then the store's error, with
    the failure as its cause."""
    policy = Backoff(retries=2, first=0.0)
    failure = ConnectionError("lost")
    assert await policy.pause(1, failure, _unavailable) == 2
    assert await policy.pause(2, failure, _unavailable) == 3
    with pytest.raises(StoreUnavailableError, match="gone after 3 attempts: lost") as raised:
        await policy.pause(3, failure, _unavailable)
    assert raised.value.__cause__ is failure


@pytest.mark.anyio
async def test_a_call_may_allow_fewer_retries() -> None:
    """``open`` tries once (a wrong URL fails fast) whatever the store's ``retries``."""
    with pytest.raises(StoreUnavailableError, match="after 1 attempts"):
        await Backoff(retries=5, first=0.0).pause(1, OSError("refused"), _unavailable, retries=0)


@pytest.mark.anyio
async def test_the_pause_is_waited() -> None:
    policy = Backoff(retries=1, first=0.05)
    start = anyio.current_time()
    assert await policy.pause(1, OSError("x"), _unavailable) == 2
    assert anyio.current_time() - start >= 0.05


def test_the_shortest_round_trip_sets_the_offset_halfway() -> None:
    """Of the readings, the one with the shortest round trip, read halfway through it."""
    now = [0.0]
    clock = ServerClock("test", local=lambda: now[0])
    samples = [(10.0, 10.4, 5_000_000_000), (11.0, 11.1, 6_000_000_000), (12.0, 12.3, 1)]
    set_offset(clock, samples)
    # The server read 6000 s when the local clock read 11.05.
    now[0] = 11.05
    assert clock() == pytest.approx(6000.0)
    now[0] = 12.05
    assert clock() == pytest.approx(6001.0)


def test_int_options() -> None:
    assert int_option(5, "retries", 0, 100) == 5
    assert int_option(0, "retries", 0, 100) == 0
    with pytest.raises(InvalidTypeError, match="retries must be an int, not bool"):
        int_option(True, "retries", 0, 100)
    with pytest.raises(InvalidTypeError, match="batch_size must be an int, not float"):
        int_option(1.0, "batch_size", 1, 10)
    with pytest.raises(InvalidArgumentError, match=r"pool_size must be between 1 and 1000, got 0"):
        int_option(0, "pool_size", 1, 1000)
    with pytest.raises(InvalidArgumentError, match="between 0 and 100"):
        int_option(101, "retries", 0, 100)
