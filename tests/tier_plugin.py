"""The tiers in a pytest session: marks each test, starts the Prefect API only for the tiers
that need it, checks at run time what the derivation (tests/tiers.py) cannot see, prints the
time each tier took, and turns SIGTERM into the Ctrl-C that stops a session cleanly.

Run-time checks, each one sentence naming the test and the fix:
- a pure or flow test that starts a process (its setup or its body; the Prefect API's own start
  excepted) fails: the fast tier (`make test-fast`, `-m "not process"`) must start none;
- a pure test that opens a Prefect client in the main thread fails (run alone it would start
  Prefect's ephemeral server; after a flow test it would quietly use the session's).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests import tiers

_state = threading.local()
_spawned: list[str] = []
_current: dict[str, str | None] = {"tier": None}
_paused = [0]
_durations: dict[str, float] = defaultdict(float)
_counts: dict[str, int] = defaultdict(int)
_classifier = tiers.Classifier()


@contextlib.contextmanager
def paused():
    """Processes started inside (the session's Prefect API) are not the test's."""
    _paused[0] += 1
    try:
        yield
    finally:
        _paused[0] -= 1


_real_execute_child = subprocess.Popen._execute_child


# Programs the standard library and libraries run for a platform fact (platform.processor(),
# ctypes.util.find_library, ...): they answer and end, they start nothing that stays.
PROBES = {"uname", "file", "ldconfig", "ldconfig.real", "gcc", "cc", "ld", "objdump",
          "lsb_release", "getconf"}


def _die_with_parent() -> None:
    # In the child before exec: SIGTERM when the session's process ends, however it ends (an
    # xdist worker is killed by its controller before its fixtures are torn down).
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


def _recording_execute_child(self, args, executable, preexec_fn, *rest, **kwargs):
    if (_paused[0] and preexec_fn is None and sys.platform == "linux"
            and threading.current_thread() is threading.main_thread()):
        preexec_fn = _die_with_parent  # the session's own servers (the Prefect API)
    if _current["tier"] in (tiers.PURE, tiers.FLOW) and not _paused[0]:
        words = [args] if isinstance(args, (str, bytes)) else list(args)
        program = str(words[0]).split()[0].rsplit("/", 1)[-1] if words else ""
        if program not in PROBES:
            _spawned.append(" ".join(map(str, words))[:200])
    return _real_execute_child(self, args, executable, preexec_fn, *rest, **kwargs)


subprocess.Popen._execute_child = _recording_execute_child


class PureTestUsedPrefectAPI(RuntimeError):
    pass


def _guard_prefect_client() -> None:
    """Once Prefect's client is imported, a pure test may not open it (main thread only:
    Prefect's own background workers flush an earlier flow test's events and logs)."""
    module = sys.modules.get("prefect.client.orchestration")
    if module is None or getattr(module, "_judgeflow_tier_guard", False):
        return
    module._judgeflow_tier_guard = True

    def refuse() -> None:
        if _current["tier"] == tiers.PURE and threading.current_thread() is threading.main_thread():
            raise PureTestUsedPrefectAPI(
                "this test was classified pure but opens a Prefect client: mark it "
                "@pytest.mark.tier('flow') (tests/tiers.py says how tiers are derived)")

    sync_enter = module.SyncPrefectClient.__enter__
    async_enter = module.PrefectClient.__aenter__

    def guarded_enter(self, *args, **kwargs):
        refuse()
        return sync_enter(self, *args, **kwargs)

    async def guarded_aenter(self, *args, **kwargs):
        refuse()
        return await async_enter(self, *args, **kwargs)

    module.SyncPrefectClient.__enter__ = guarded_enter
    module.PrefectClient.__aenter__ = guarded_aenter


_xdist_controller = [False]


def _children() -> list[int]:
    """This process's direct children (read from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text() if entry.isdigit() else ""
        except OSError:
            continue
        if stat and int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
            found.append(int(entry))
    return found


def _stop_on_sigterm(signum, frame):
    # pytest stops cleanly on KeyboardInterrupt: fixtures are torn down, so the Prefect API,
    # MLflow and browser processes the session started are stopped rather than orphaned.
    # Under xdist the workers hold those fixtures: they get the Ctrl-C a terminal would send.
    if _xdist_controller[0]:
        for child in _children():
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGINT)
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    config.addinivalue_line("markers", "tier(name): override the derived tier (pure, flow, "
                                       "process); see tests/tiers.py")
    for tier in tiers.TIERS:
        config.addinivalue_line("markers", f"{tier}: derived tier (tests/tiers.py), for -m")
    config.addinivalue_line("markers", "browser: drives Chromium (process tier)")
    config.addinivalue_line("markers", "mlflow_server: starts an `mlflow server` (process tier)")
    _xdist_controller[0] = (not hasattr(config, "workerinput")
                            and bool(getattr(config.option, "numprocesses", None)))
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop_on_sigterm)


def pytest_addoption(parser):
    parser.addoption("--cases-apart", action="store_true",
                     help="with --dist loadfile: each case of a parametrized test may run on "
                          "a worker of its own (make test-fast; tests/tier_plugin.py)")


def scheduling_unit(nodeid: str) -> str:
    """What `--cases-apart` keeps on one worker: a parametrized case alone, else its file."""
    return nodeid if nodeid.endswith("]") else nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile --cases-apart`: each case of a parametrized test is a unit of its own.

    A file stays on one worker, in order, for its module fixtures and its order-dependent
    tests; but the cases of one parametrized test are independent by construction, and the
    fast tier's costliest tests are such cases (Monte Carlo checks at several sizes, 40-200
    CPU-s per file): kept together, one file on one worker is the fast tier's wall clock. The
    process tier keeps whole files: its cases share module-scoped servers.
    """
    if config.getvalue("dist") != "loadfile" or not config.getoption("cases_apart"):
        return None
    from xdist.scheduler import LoadFileScheduling

    class CasesApart(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scheduling_unit(nodeid)

    return CasesApart(config, log)


def tier_of(item) -> str:
    named = tiers.explicit(item)
    if named:
        return named
    if any(item.get_closest_marker(m) for m in tiers.PROCESS_MARKERS):
        return tiers.PROCESS
    return _classifier.tier(tiers.roots_of(item))


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = tier_of(item)
        item.stash[_TIER] = tier
        item.add_marker(tier)
        item.user_properties.append(("tier", tier))  # reaches xdist's controller with reports
        needs_api = tier == tiers.FLOW
        if tier == tiers.PROCESS:
            roots = tiers.roots_of(item)
            for group in _classifier.groups(roots):
                item.add_marker(group)
            # shards and image tests drive Prefect servers and workers: given the API, unread.
            needs_api = (any(item.get_closest_marker(m) for m in tiers.PROCESS_MARKERS)
                         or _classifier.touches_prefect(roots))
        if needs_api and "prefect_api" not in item.fixturenames:
            # Requested like any fixture: the session's API starts with the first such test.
            item.fixturenames.insert(0, "prefect_api")


_TIER = pytest.StashKey[str]()


def _check_spawned(item, phase: str) -> None:
    if not _spawned:
        return
    started = "; ".join(_spawned[:3])
    _spawned.clear()
    tier = item.stash.get(_TIER, None)
    pytest.fail(f"{item.nodeid} was classified {tier} but its {phase} started a process "
                f"({started}): mark it @pytest.mark.tier('process') (tests/tiers.py)",
                pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    _spawned.clear()
    _current["tier"] = item.stash.get(_TIER, None)
    if _current["tier"] == tiers.PURE:
        _guard_prefect_client()
    try:
        return (yield)
    finally:
        _check_spawned(item, "setup")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _spawned.clear()
    if _current["tier"] == tiers.PURE:
        _guard_prefect_client()  # the test itself may have imported Prefect during setup
    try:
        return (yield)
    finally:
        _check_spawned(item, "body")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    try:
        return (yield)
    finally:
        _spawned.clear()
        _current["tier"] = None


def pytest_runtest_logreport(report):
    tier = dict(report.user_properties).get("tier")
    if tier in tiers.TIERS:
        _durations[tier] += report.duration
        if report.when == "call":
            _counts[tier] += 1


_started = time.monotonic()


def pytest_terminal_summary(terminalreporter):
    if not _counts:
        return
    write = terminalreporter.write_line
    terminalreporter.section("time per tier (summed over workers; tests/tiers.py)")
    for tier in tiers.TIERS:
        write(f"{tier:>8}: {_counts[tier]:5d} tests {_durations[tier]:8.1f} s")
    write(f"{'wall':>8}: {time.monotonic() - _started:20.1f} s")
