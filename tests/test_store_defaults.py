"""The contract's default batch verbs (``Store.look_many``, ``Store.reschedule_many``) pass the
contract suite: a third-party store that leaves them out gets verbs that check their arguments,
and refuse a closed store, as every store of this package does (an empty batch included).

The example store of ``examples/contract_store`` implements them; here a subclass of it takes the
defaults instead. (``Store.hand_back``'s default keeps the attempt, as its docstring says, so the
suite's hand-back tests are not its to pass: only its checks are tested, below.)
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from rehydrate.abc import Store
from rehydrate.errors import InvalidArgumentError, StoreNotOpenError
from rehydrate.testing import FakeClock
from rehydrate.testing.contract import Harness, StoreContract

_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "contract_store" / "dict_store.py"


def _dict_store() -> type[Any]:
    spec = importlib.util.spec_from_file_location("rehydrate_example_dict_store", _EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.DictStore  # type: ignore[no-any-return]


DictStore = _dict_store()


class DefaultsStore(DictStore):  # type: ignore[misc, valid-type]
    """The example store with the contract's default ``look_many`` and ``reschedule_many``."""

    look_many = Store.look_many
    reschedule_many = Store.reschedule_many


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class TestDefaultBatchVerbs(StoreContract):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[Harness]:
        clock = FakeClock(1000.0)
        async with DefaultsStore(clock=clock) as store:
            yield Harness(
                store=store,
                advance=clock.advance,
                twin=lambda **options: DefaultsStore(clock=clock, **options),
                shared=False,
            )


class HandBackDefault(DictStore):  # type: ignore[misc, valid-type]
    hand_back = Store.hand_back


@pytest.mark.anyio
async def test_the_default_hand_back_checks_like_the_others() -> None:
    """``Store.hand_back``'s default checks the name and the items first, and refuses a closed
    store for an empty batch too."""
    store = HandBackDefault(clock=FakeClock(1000.0))
    with pytest.raises(StoreNotOpenError):
        await store.hand_back("n", [])
    async with store:
        assert await store.hand_back("n", []) == []
        with pytest.raises(InvalidArgumentError):
            await store.hand_back("", [])
        with pytest.raises(InvalidArgumentError, match="hand_back needs each claim's token"):
            await store.hand_back("n", [("a", cast(int, None), 1)])
