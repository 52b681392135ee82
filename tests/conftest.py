from __future__ import annotations

import pytest

from rehydrate import Dehydrator
from rehydrate.testing import FakeClock


@pytest.fixture(
    params=[
        pytest.param(("asyncio", {}), id="asyncio"),
        pytest.param(("trio", {}), id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, object]]:
    """Every async test runs on asyncio and on trio."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def dehydrator(clock: FakeClock) -> Dehydrator:
    return Dehydrator(clock=clock)
