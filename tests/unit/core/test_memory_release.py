"""What a flow used is given back when it ends (scripts/bench_memory.py measures it over many flows).

The relay case keeps a weak reference (or the only expected reference) to what a flow owned
and checks it is gone once the flow ended, while the connection that held it is still open;
the allocator case checks that freed heap pages leave the process's resident memory.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest

from tooldisco.net.relay import HEADER, Relay
from tooldisco.core.answers import Head

ADDON = Path(__file__).resolve().parents[3] / "addon"


class FlowState:
    """Stands for what a live flow's serving closure holds (its runner, context, bodies)."""


def relay_request(token: str, body: bytes) -> bytes:
    return (f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\n{HEADER}: {token}\r\n"
            f"content-length: {len(body)}\r\n\r\n").encode() + body


async def test_a_kept_alive_relay_connection_holds_nothing_of_the_flow_it_served() -> None:
    relay = Relay()
    await relay.start()
    bodies: list[bytes] = []

    def register() -> weakref.ref[FlowState]:
        state = FlowState()

        async def serve(headers, body):
            bodies.append(body)
            assert state is not None
            yield Head(200, [("content-type", "text/event-stream")])
            yield b"data: done\n\n"

        return weakref.ref(state), relay.register(serve)

    watch, token = register()
    reader, writer = await asyncio.open_connection("127.0.0.1", relay.port)
    try:
        writer.write(relay_request(token, b"x" * 100_000))
        await reader.readuntil(b"0\r\n\r\n")  # the whole answer: the flow is over, the connection stays
        for _ in range(100):  # the relay finishes the exchange in a few turns of the loop
            gc.collect()
            if watch() is None:
                break
            await asyncio.sleep(0)
        assert watch() is None  # the serving closure (a runner, a context) is gone
        assert [r for r in gc.get_referrers(bodies[0]) if r is not bodies] == []  # and the body
    finally:
        writer.close()
        await relay.close()


TRIM_PROBE = textwrap.dedent("""
    import sys, threading, time
    import psutil
    sys.path.insert(0, sys.argv[2])
    from tooldisco.core import allocator

    def churn():  # what parsing requests in a worker thread does, next to a cache that keeps a little
        pinned, blocks = [], []
        for i in range(100_000):
            blocks.append(b"%d" % i + bytes(2_000))
            if i % 64 == 0:
                pinned.append(blocks[-1])
        return pinned

    base = psutil.Process().memory_info().rss
    result = []
    worker = threading.Thread(target=lambda: result.append(churn()))
    worker.start()
    worker.join()
    if sys.argv[1] == "on":
        assert allocator.trim_periodically(0.01)
        for _ in range(3000):  # until the trimmer ran (it does within milliseconds; this only bounds a hang)
            if psutil.Process().memory_info().rss - base < 32 << 20:
                break
            time.sleep(0.01)
    print((psutil.Process().memory_info().rss - base) >> 20)
""")


def left_by(probe: str, mode: str) -> int:
    """MiB of resident memory ``probe`` leaves behind in a fresh interpreter, in ``mode`` (on / off)."""
    out = subprocess.run([sys.executable, "-c", probe, mode, str(ADDON)], capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_free_heap_pages_go_back_to_the_os() -> None:
    """200 MB of 2 KB blocks freed around a few that stay: glibc keeps the pages resident
    until it is asked to trim; the trimmer asks."""
    assert left_by(TRIM_PROBE, "off") > 64  # MiB: the probe does show the problem without the trimmer
    assert left_by(TRIM_PROBE, "on") < 32


CYCLE_PROBE = textwrap.dedent("""
    import gc, sys, time
    import psutil
    sys.path.insert(0, sys.argv[2])
    from tooldisco.core import allocator

    gc.disable()  # Python's own full collection can take many requests to come: here it never does
    base = psutil.Process().memory_info().rss

    class Layer:  # what mitmproxy's layers leave: a cycle that holds the flow's body
        pass

    for i in range(4):
        layer = Layer()
        layer.body, layer.me = b"x" * (30 << 20), layer
    del layer
    assert allocator.trim_periodically(0.01)
    if sys.argv[1] == "on":
        allocator.collect_soon(30 << 20)
    for _ in range(300):  # until the trimmer ran (within milliseconds; this only bounds a hang)
        if psutil.Process().memory_info().rss - base < 32 << 20:
            break
        time.sleep(0.01)
    print((psutil.Process().memory_info().rss - base) >> 20)
""")



def test_a_large_flow_has_the_cycles_around_its_body_collected() -> None:
    assert left_by(CYCLE_PROBE, "off") > 100  # MiB: four 30 MB bodies in cycles stay without a full collection
    assert left_by(CYCLE_PROBE, "on") < 32


class Exchange:
    """Stands for what mitmproxy leaves of one flow: a cycle (its type check's exception, frames)
    around the request's body, which reference counting never frees."""


@pytest.fixture
def allocator_state(monkeypatch: pytest.MonkeyPatch):
    """``tooldisco.core.allocator`` with no collection asked for and nothing counted yet."""
    from tooldisco.core import allocator

    for name, value in [("_collect_rounds", 0), ("_collect_generation", allocator.YOUNG), ("_ended_bytes", 0),
                        ("_asked", 0)]:
        monkeypatch.setattr(allocator, name, value)
    return allocator


def test_the_cycles_around_many_ordinary_bodies_are_collected(allocator_state) -> None:
    """Collector thresholds count objects, not bytes: 300 KB bodies, each below any size that
    matters alone, are what ``collect_soon`` adds up. Until they reach ``COLLECT_AFTER`` no
    collection is asked for (one is not free); once they do, the trimmer's next round frees
    every cycle that held one (a collection of the young generations is enough: the cycles are
    garbage from the start), and the count starts again."""
    allocator = allocator_state
    size = 300_000
    below = allocator.COLLECT_AFTER // size - 1  # flows whose bodies stay below the budget
    ended: list[weakref.ref[Exchange]] = []

    def flow() -> None:
        exchange = Exchange()
        exchange.body, exchange.me = bytes(size), exchange  # type: ignore[attr-defined]
        ended.append(weakref.ref(exchange))
        allocator.collect_soon(size)

    gc.collect()
    gc.disable()  # the interpreter's own collections would hide what the accounting does
    try:
        for _ in range(below):
            flow()
        allocator.trim_round(None)
        assert all(ref() is not None for ref in ended)  # below the budget: nothing asked for, all held
        for _ in range(2):
            flow()  # past it
        assert allocator._collect_generation == allocator.YOUNG
        allocator.trim_round(None)
        assert [ref for ref in ended if ref() is not None] == []  # every body's cycle is gone
        assert allocator._ended_bytes == 0 and allocator._collect_rounds == allocator.COLLECT_ROUNDS - 1
        allocator.collect_soon(size)  # the count starts again: a flow after it asks for nothing new
        assert allocator._ended_bytes == size and allocator._collect_rounds == allocator.COLLECT_ROUNDS - 1
    finally:
        gc.enable()


def test_every_few_collections_and_a_large_flow_ask_for_a_full_one(allocator_state) -> None:
    """What a young collection found still reachable moves to the oldest generation: every
    ``FULL_EVERY``-th collection asked for is a full one, and so is one a single large flow asks
    for; a full one asked for is not turned into a young one by a request that follows it."""
    allocator = allocator_state
    asked = []
    for _ in range(2 * allocator.FULL_EVERY):
        allocator.collect_soon(allocator.COLLECT_AFTER // 2)
        allocator.collect_soon(allocator.COLLECT_AFTER // 2)
        asked.append(allocator._collect_generation)
        allocator._collect_rounds = 0  # the trimmer ran them
    assert asked == ([allocator.YOUNG] * (allocator.FULL_EVERY - 1) + [allocator.OLDEST]) * 2
    allocator.collect_soon(allocator.COLLECT_AFTER)
    assert allocator._collect_generation == allocator.OLDEST and allocator._asked == 0
    allocator.collect_soon(allocator.COLLECT_AFTER - 1)
    allocator.collect_soon(1)  # asks for a young one while the full one is still pending: kept full
    assert allocator._collect_generation == allocator.OLDEST
    assert allocator._collect_rounds == allocator.COLLECT_ROUNDS
