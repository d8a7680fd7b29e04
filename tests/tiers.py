"""Each test's tier, derived from the code it reaches, so that nobody has to remember to mark it.

- `process`: starts whole processes (a `judgeflow` subprocess, `prefect server` and workers, an
  `mlflow server`, Chromium), or carries the `shards`/`image` marker;
- `flow`: runs a flow, a task or another Prefect API call in this process, on the session's API;
- `pure`: neither; no Prefect API is started for it.

The test function, the fixtures it requests and the helpers they call are followed through their
code objects: names resolved in each function's globals, attributes of the modules they name,
methods of the classes they name, the commands of a Typer app. Reaching a Prefect flow or task,
or Prefect's client, events, deployments and the like, makes a test `flow`; reaching
`subprocess`, `multiprocessing` or an `os` spawn call from the tests' own code (tests/, bench/)
makes it `process`. Process spawning is looked for in the tests' code only: the command's own
temporary API is started by the product (flows/commands/prefect_api.py) only when no API is
configured, which in tests the session's API is.

`@pytest.mark.tier("pure" | "flow" | "process")` overrides the derivation. What the derivation
cannot see, the session checks while the tests run (tests/conftest.py): a test of another tier
that starts a process, or a pure test that opens a Prefect client, fails with one sentence.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import types
from collections.abc import Iterator

PURE, FLOW, PROCESS = "pure", "flow", "process"
TIERS = (PURE, FLOW, PROCESS)
# Markers that already mean "starts whole processes".
PROCESS_MARKERS = ("shards", "image")
# Groups of the process tier that need something of their own (select with -m).
GROUP_MARKERS = {"browser": "tests.browser", "mlflow_server": "tests.mlflow_server"}

# Code followed: the project's and the tests' own; everything else is a leaf.
_FOLLOWED = ("tests", "bench", "flows", "tasks", "judges", "prompts")
_NOT_FOLLOWED = ("tests.tiers", "tests.tier_plugin")
# Code in which starting a process counts (the product's own spawning depends on configuration).
_SPAWNING_CODE = ("tests", "bench")
_SPAWN_MODULES = ("subprocess", "multiprocessing", "pty", "asyncio.subprocess",
                  "concurrent.futures.process")
_SPAWN_OS = {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "spawnv",
             "spawnve", "spawnvp", "spawnvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe",
             "execv", "execve", "execvp", "execvpe", "execl", "execle", "execlp", "execlpe",
             "create_subprocess_exec", "create_subprocess_shell"}
# Prefect modules that work without an API (errors, settings, utilities, states, run context).
_PREFECT_OFFLINE = ("prefect.exceptions", "prefect.settings", "prefect.utilities", "prefect.types",
                    "prefect.logging", "prefect.runtime", "prefect.states", "prefect.context",
                    "prefect.results", "prefect._internal", "prefect.cache_policies",
                    "prefect.serializers", "prefect.filesystems", "prefect.futures")


def _root(module: str | None) -> str:
    return (module or "").split(".")[0]


def _in(module: str | None, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or (module or "").startswith(p + ".") for p in prefixes)


def _is_prefect_run(obj: object) -> bool:
    """A Prefect flow or task object, or Prefect code that talks to an API."""
    flow_types = _prefect_types()
    if flow_types and isinstance(obj, flow_types):
        return True
    if isinstance(obj, types.ModuleType):
        return False  # a module is judged by the attributes used (see _edges)
    module = getattr(obj, "__module__", None)
    return (isinstance(module, str) and _root(module) == "prefect"
            and not _in(module, _PREFECT_OFFLINE))


def _prefect_types() -> tuple[type, ...]:
    if "prefect" not in sys.modules:  # nothing imported Prefect: nothing can be a flow
        return ()
    from prefect import Flow, Task

    return (Flow, Task)


def _spawns(obj: object, name: str | None = None) -> bool:
    if isinstance(obj, types.ModuleType):
        return _in(obj.__name__, _SPAWN_MODULES)
    module = getattr(obj, "__module__", None)
    if isinstance(module, str) and _in(module, _SPAWN_MODULES):
        return True
    return module in ("posix", "os", "asyncio", "asyncio.subprocess") and \
        getattr(obj, "__name__", name) in _SPAWN_OS


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _unwrap(obj: object) -> object:
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    if isinstance(obj, types.MethodType):
        obj = obj.__func__
    if isinstance(obj, functools.partial):
        obj = obj.func
    if isinstance(obj, property):
        obj = obj.fget
    if _is_prefect_run(obj):  # a flow or task wraps its function: keep the flow
        return obj
    try:
        return inspect.unwrap(obj, stop=_is_prefect_run) if callable(obj) else obj
    except ValueError:
        return obj


class Classifier:
    """Derives tiers; remembers what each function reaches across the session's tests."""

    def __init__(self) -> None:
        self._edges: dict[int, list[object]] = {}
        self._keep: list[object] = []  # keeps ids stable while they are remembered
        self._reaches_flow: dict[int, bool] = {}

    def tier(self, roots: list[object]) -> str:
        """The tier of a test whose function, fixtures and parameters are `roots`."""
        if self._spawning(roots):
            return PROCESS
        return FLOW if self._reaches_prefect(roots) else PURE

    def touches_prefect(self, roots: list[object]) -> bool:
        """Whether a process-tier test reaches Prefect at all (its settings included: such a
        test hands the session's API to the processes it starts)."""
        return any(_is_prefect_run(obj) or _root(getattr(obj, "__module__", None)) == "prefect"
                   for obj in self._walk(roots, _FOLLOWED))

    def groups(self, roots: list[object]) -> set[str]:
        """The process groups (browser, MLflow server) the roots' code reaches."""
        found: set[str] = set()
        for obj in self._walk(roots, _SPAWNING_CODE):
            module = getattr(obj, "__module__", None)
            for group, helper in GROUP_MARKERS.items():
                if module == helper:
                    found.add(group)
        return found

    def _followed(self, obj: object, where: tuple[str, ...]) -> bool:
        if isinstance(obj, (types.FunctionType, type)):
            # The derivation's own code names Prefect's Flow without running one.
            return _in(obj.__module__, where) and obj.__module__ not in _NOT_FOLLOWED
        return _is_typer(obj)

    def _edges_of(self, obj: object) -> list[object]:
        key = id(obj)
        if key not in self._edges:
            self._keep.append(obj)
            self._edges[key] = list(_edges(obj))
        return self._edges[key]

    def _walk(self, roots: list[object], where: tuple[str, ...]) -> Iterator[object]:
        """Every object reached from `roots` through code in the `where` packages."""
        seen: set[int] = set()
        stack = [_unwrap(r) for r in roots]
        while stack:
            obj = stack.pop()
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            yield obj
            if self._followed(obj, where):
                stack.extend(self._edges_of(obj))

    def _spawning(self, roots: list[object]) -> bool:
        return any(_spawns(obj) for obj in self._walk(roots, _SPAWNING_CODE))

    def _reaches_prefect(self, roots: list[object]) -> bool:
        # A walk that found nothing visited everything reachable from each node it saw: those
        # nodes are known not to reach Prefect, and later walks stop there.
        seen: list[int] = []
        visited: set[int] = set()
        stack = [_unwrap(r) for r in roots]
        while stack:
            obj = stack.pop()
            key = id(obj)
            if key in visited or self._reaches_flow.get(key) is False:
                continue
            visited.add(key)
            if _is_prefect_run(obj):
                return True
            if self._followed(obj, _FOLLOWED):
                seen.append(key)
                stack.extend(self._edges_of(obj))
        for key in seen:
            self._reaches_flow[key] = False
        return False


def _is_typer(obj: object) -> bool:
    return type(obj).__name__ == "Typer" and _root(type(obj).__module__) == "typer"


def _edges(obj: object) -> Iterator[object]:
    """What a function, class or Typer app refers to."""
    if _is_typer(obj):
        yield from _typer_edges(obj)
    elif isinstance(obj, type):
        for value in vars(obj).values():
            value = _unwrap(value)
            if isinstance(value, (types.FunctionType, type)):
                yield value
    else:
        yield from _function_edges(obj)  # type: ignore[arg-type]


def _typer_edges(app) -> Iterator[object]:
    for command in app.registered_commands:
        yield _unwrap(command.callback)
    for group in app.registered_groups:
        yield group.typer_instance
    if app.registered_callback is not None:
        yield _unwrap(app.registered_callback.callback)
    # Commands built only when they run (flows/commands/lazy.py), and the function each runs.
    for _, command in getattr(app.info.cls, "listed", ()):
        yield _unwrap(getattr(command, "__wrapped__", command))


def _function_edges(func: types.FunctionType) -> Iterator[object]:
    names = {n for code in _codes(func.__code__) for n in code.co_names}
    namespace = func.__globals__
    for name in names:
        value = namespace[name] if name in namespace else _imported_inside(name)
        if value is None:
            continue
        yield _unwrap(value)
        if isinstance(value, types.ModuleType):
            yield from _attributes_used(value, names)
    for cell in func.__closure__ or ():
        try:
            content = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if callable(content):
            yield _unwrap(content)


def _attributes_used(module: types.ModuleType, names: set[str],
                     depth: int = 3) -> Iterator[object]:
    """`module.attr` (and `package.module.attr`): the attribute names are among the
    function's names too."""
    for attr in names:
        found = getattr(module, attr, None)
        if found is None:
            continue
        if isinstance(found, types.ModuleType):
            yield found
            if depth > 1 and found is not module:
                yield from _attributes_used(found, names, depth - 1)
        elif _spawns(found, attr):
            yield _SpawnCall(module.__name__, attr)
        else:
            yield _unwrap(found)


def _imported_inside(name: str) -> types.ModuleType | None:
    """A module a function imports in its body (`from flows.evaluate import evaluate` puts
    "flows.evaluate" among its names): the command line imports its flows that way."""
    root = _root(name)
    if root not in (*_FOLLOWED, "prefect") and not _in(name, _SPAWN_MODULES):
        return None
    if name not in sys.modules and root in _FOLLOWED:
        try:
            importlib.import_module(name)
        except Exception:  # not a module after all (an attribute of the same name)
            return None
    return sys.modules.get(name)


class _SpawnCall:
    """`os.fork` and the like, seen through the module that holds them."""

    def __init__(self, module: str, name: str) -> None:
        self.__module__ = "os" if module in ("os", "posix") else module
        self.__name__ = name


def explicit(item) -> str | None:
    """The tier a test names with `@pytest.mark.tier(...)`, if any."""
    marker = item.get_closest_marker("tier")
    if marker is None:
        return None
    name = marker.args[0] if marker.args else None
    if name not in TIERS:
        raise ValueError(f"{item.nodeid}: @pytest.mark.tier({name!r}) names no tier: use one of "
                         f"{', '.join(TIERS)}")
    return name


def roots_of(item) -> list[object]:
    """The test's function, the fixtures it (transitively) requests, and its parameters."""
    roots: list[object] = [getattr(item, "obj", None)]
    info = getattr(item, "_fixtureinfo", None)
    for name in getattr(item, "fixturenames", ()):
        if name == "prefect_api":
            roots.append(_PrefectAPIFixture)
        for definition in (info.name2fixturedefs.get(name, ()) if info else ()):
            roots.append(definition.func)
    callspec = getattr(item, "callspec", None)
    for value in (callspec.params.values() if callspec else ()):
        if callable(value):
            roots.append(value)
    return [r for r in roots if r is not None]


class _PrefectAPIFixture:
    """Asking for the `prefect_api` fixture by name is asking for the API."""

    __module__ = "prefect.client.orchestration"


