"""Fixtures for end-to-end tests: the fake provider, a real mitmdump, and clients.

Fixtures
--------
``fake_provider`` (session)  the running :class:`FakeProvider`.
``fake``                     the same, reset (no requests, default script, default delay).
``addon_script`` (module)    the ``-s`` script; default ``addon/tool_discovery.py``, None for none.
``tool_discovery_config`` (module)
                             YAML text (or ``fn(workdir) -> text``) for ``--set
                             tool_discovery_config=``; default None (option not passed).
``mitm_extra_args`` (module) extra mitmdump arguments; default ().
``mitm``                     a running :class:`MitmDump` built from the three above, shared by
                             the module (restarted if an earlier test left it dead); depends
                             on ``fake``, so the fake is reset for every test.
``mitm_factory``             ``mitm_factory(script=..., config=..., extra_args=...)`` starts a
                             private mitmdump for this test (stopped at teardown).
``anthropic_client`` / ``openai_client``
                             real SDK clients through ``mitm`` (real base URLs, no retries).
``agent_env``                env dict for a subprocess agent through ``mitm`` (private HOME).

Override the module-scoped ones in a test module (``@pytest.fixture(scope="module")``) or
parametrize them (``@pytest.mark.parametrize("tool_discovery_config", [...], scope="module")``).
On failure the report gets the mitmdump log of the test and the fake's recorded requests.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from tests.e2e import agents  # noqa: E402
from tests.e2e.harness import ADDON_PATH, ConfigSpec, MitmDump, live_proxies, tail  # noqa: E402
from tests.fakeprovider import FakeProvider  # noqa: E402

DEFAULT_STREAM_DELAY = 0.05
_UNSET: Any = object()
_LOG_MARKS = pytest.StashKey[dict[int, int]]()
_fake_instance: FakeProvider | None = None


@pytest.fixture(scope="session")
def fake_provider() -> Iterator[FakeProvider]:
    global _fake_instance
    with FakeProvider(stream_delay=DEFAULT_STREAM_DELAY) as fake:
        _fake_instance = fake
        yield fake
        _fake_instance = None


@pytest.fixture
def fake(fake_provider: FakeProvider) -> FakeProvider:
    fake_provider.reset()
    fake_provider.stream_delay = DEFAULT_STREAM_DELAY
    return fake_provider


@pytest.fixture(scope="module")
def addon_script(request: pytest.FixtureRequest) -> Path | None:
    return getattr(request, "param", ADDON_PATH)


@pytest.fixture(scope="module")
def tool_discovery_config(request: pytest.FixtureRequest) -> ConfigSpec:
    return getattr(request, "param", None)


@pytest.fixture(scope="module")
def mitm_extra_args(request: pytest.FixtureRequest) -> Sequence[str]:
    return getattr(request, "param", ())


@pytest.fixture(scope="module")
def _module_mitm(
    fake_provider: FakeProvider,
    addon_script: Path | None,
    tool_discovery_config: ConfigSpec,
    mitm_extra_args: Sequence[str],
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[MitmDump]:
    proxy = MitmDump(
        tmp_path_factory.mktemp("mitm"),
        fake_provider.url,
        script=addon_script,
        config=tool_discovery_config,
        extra_args=mitm_extra_args,
        name=f"module {request.module.__name__}",
    )
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture
def mitm(_module_mitm: MitmDump, fake: FakeProvider) -> MitmDump:
    return _module_mitm.ensure_running()


@pytest.fixture
def mitm_factory(
    fake: FakeProvider,
    addon_script: Path | None,
    tool_discovery_config: ConfigSpec,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., MitmDump]]:
    started: list[MitmDump] = []

    def make(
        *,
        script: Path | str | None = _UNSET,
        config: ConfigSpec = _UNSET,
        extra_args: Sequence[str] = (),
        start: bool = True,
    ) -> MitmDump:
        """A private mitmdump; ``script``/``config`` default to the module's fixtures."""
        proxy = MitmDump(
            tmp_path_factory.mktemp("mitm"),
            fake.url,
            script=addon_script if script is _UNSET else script,
            config=tool_discovery_config if config is _UNSET else config,
            extra_args=extra_args,
            name=f"factory #{len(started) + 1}",
        )
        started.append(proxy)
        return proxy.start() if start else proxy

    yield make
    for proxy in started:
        proxy.stop()


@pytest.fixture
def anthropic_client(mitm: MitmDump) -> Iterator[Any]:
    client = mitm.anthropic()
    yield client
    client.close()


@pytest.fixture
def openai_client(mitm: MitmDump) -> Iterator[Any]:
    client = mitm.openai()
    yield client
    client.close()


@pytest.fixture
def agent_env(mitm: MitmDump, tmp_path: Path) -> dict[str, str]:
    return mitm.agent_env(home=tmp_path / "home")


# --- failure reports -------------------------------------------------------------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    item.stash[_LOG_MARKS] = {id(p): p.log_offset() for p in live_proxies()}
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.when in ("setup", "call"):
        marks = item.stash.get(_LOG_MARKS, {})
        for proxy in live_proxies():
            report.sections.append((f"mitmdump log ({proxy.name})", tail(proxy.log_text(marks.get(id(proxy), 0)))))
        if _fake_instance is not None:
            lines = [
                f"#{r.index} {r.method} {r.path}{'?' + r.query if r.query else ''} -> {r.status}"
                f" tools={r.tool_names} reply={json.dumps(r.reply)[:300] if r.reply else None}"
                f"{' error=' + r.error[:500] if r.error else ''}"
                for r in _fake_instance.requests
            ]
            report.sections.append(("fake provider requests", "\n".join(lines) or "(none)"))
    return report


@pytest.fixture(scope="session")
def agent_bins() -> agents.AgentBinaries:
    """The real agent CLIs (``scripts/install_agents``), installed once per test session."""
    if not agents.npm_available():
        pytest.skip("npm/node are not installed: the agent CLIs cannot be installed")
    return agents.install_agents()
