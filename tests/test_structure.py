"""The structure the design promises, read from the code: imports go one way, without cycles."""

import ast
import functools
from pathlib import Path

from judges.pairwise.metrics import pairwise_summary
from judges.result_names.pairwise import (
    LC_NOTE,
    LENGTH_CONTROL_NAMES,
    NOVA_FIELDS,
    WINRATE_NOTE,
    pairwise_metric_fields,
)

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("flows", "tasks", "judges")  # each may import only the layers after it


MAX_MODULES_PER_FOLDER = 16


@functools.cache
def _tree(path: Path) -> ast.Module:
    """Each module parsed once per session: the rules below all read the same trees."""
    return ast.parse(path.read_text())


@functools.cache
def _modules() -> dict[str, Path]:
    """Every module of the three layers, sub-packages included, by dotted name."""
    return {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for layer in LAYERS
        for path in (ROOT / layer).rglob("*.py")
    }


def _unit(module: str) -> str:
    """What a module belongs to for the cycle rule: its sub-package, or itself at the top."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or _is_package(module) else module


def _is_package(module: str) -> bool:
    return (ROOT / Path(*module.split(".")) / "__init__.py").exists()


@functools.cache
def _imports(path: Path) -> frozenset[str]:
    """Every project module `path` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {name for name in names if name.split(".")[0] in LAYERS}
    return frozenset(found)


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {m for m in _imports(path) if m in modules and m != name}
            for name, path in modules.items()}


def test_imports_go_one_way_flows_tasks_judges():
    rank = {layer: index for index, layer in enumerate(LAYERS)}
    upward = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if rank[target.split(".")[0]] < rank[module.split(".")[0]]
    ]
    assert upward == []


def test_no_import_cycles():
    graph, state, cycles = _graph(), {}, []

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_no_cycles_between_sub_packages():
    graph: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        graph.setdefault(_unit(module), set()).update(
            _unit(t) for t in targets if _unit(t) != _unit(module))
    cycles, state = [], {}

    def visit(unit: str, path: list[str]) -> None:
        state[unit] = "open"
        for target in sorted(graph.get(unit, ())):
            if state.get(target) == "open":
                cycles.append(" -> ".join([*path[path.index(target):], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[unit] = "done"

    for unit in sorted(graph):
        if unit not in state:
            visit(unit, [unit])
    assert cycles == []


# The doors: what each package may import besides itself and its own sub-packages. A package is
# a folder with an __init__.py; the modules at the top of a layer form the layer's own package
# ("flows", "tasks", "judges"). "x.*" is x and every package below it. The package docstrings
# say the same in words; this table is what is checked.
DOORS: dict[str, tuple[str, ...]] = {
    "flows": ("flows.*", "tasks.*", "judges.*"),  # the flows and their parameters sequence all
    "flows.commands": ("flows.*", "tasks.*", "judges.*"),  # the command line, imported lazily
    "flows.phases": ("flows", "flows.run", "flows.preflight", "flows.shards", "tasks.*",
                     "judges.*"),
    "flows.preflight": ("flows", "flows.run", "tasks.*", "judges.*"),
    "flows.relay": (),
    "flows.run": ("tasks.*", "judges.*"),
    # The shard flow is a deployment entrypoint: it guards its parameters (preflight/trust.py).
    "flows.shards": ("flows", "flows.run", "flows.preflight", "tasks.*", "judges.*"),
    "tasks": ("tasks.*", "judges.*"),
    "tasks.agents": ("judges.*",),
    "tasks.dataset": ("tasks.agents", "tasks.mlflow", "judges.*"),
    "tasks.mlflow": ("tasks.agents", "tasks.storage", "judges.*"),
    "tasks.regression": ("judges.*",),
    "tasks.report": ("tasks.regression", "judges.*"),
    "tasks.storage": ("judges.*",),
    "judges": ("judges.*",),
    # call_token.py reads the signing key (judges/integrity.py, which imports no judgeflow).
    "judges.blocks": ("judges",),
    # judges.panel: the pairwise judge's panel votes on each pair (judges/panel/pairs.py).
    "judges.builtin": ("judges", "judges.blocks", "judges.model", "judges.trajectory",
                       "judges.pairwise", "judges.toolcalls", "judges.result_names",
                       "judges.panel"),
    "judges.builtin.agent": ("judges", "judges.trajectory", "judges.builtin"),
    "judges.builtin.sessions": ("judges", "judges.trajectory", "judges.builtin"),
    "judges.calibration": ("judges", "judges.pairwise", "judges.result_names"),
    "judges.model": (),
    "judges.model.batch": ("judges.model",),
    "judges.names": ("judges", "judges.builtin", "judges.result_names"),
    "judges.pairwise": ("judges", "judges.model"),
    "judges.panel": (),
    "judges.planning": ("judges", "judges.builtin"),
    # The one name writer, one module per family of names (judges/result_names/__init__.py).
    "judges.result_names": ("judges", "judges.model", "judges.pairwise"),
    "judges.toolcalls": ("judges",),
    "judges.trajectory": ("judges",),
}

# Doors no package opens, even where its row above would let it: module prefix -> target prefix.
NEVER: dict[tuple[str, str], str] = {
    ("tasks.storage", "judges.engine"): "storage keeps and reads results; judging is the engine's",
    ("tasks.storage", "judges.calls"): "storage keeps and reads results; judging is the engine's",
}

# Edges that break their package's door and need more than a move to mend:
# (module, imported module) -> why it stands for now.
KNOWN_EXCEPTIONS: dict[tuple[str, str], str] = {
    **{("tasks.dataset.labels", f"tasks.storage.{module}"):
       "reusing an earlier run's calibration reads that run back; the calibration source belongs "
       "with the run's preparation (issue 47 item 1), not with reading the set"
       for module in ("baseline", "outputs", "run_integrity")},
    ("tasks.regression.baseline_rows", "tasks.storage.baseline"):
        "the baseline's rows are read back from its published folder here; the rest of "
        "tasks/regression decides in pure functions (the reader belongs in tasks/storage)",
    ("tasks.report.history_page", "tasks.storage.history_entry"):
        "the history page draws the suite's signed history entries, whose model lives with "
        "the history in tasks/storage (issue 45 item 7 is reworking both now)",
}


def _package(module: str) -> str:
    """The package a module's door rule is read from (a package's __init__ is the package)."""
    return module if _is_package(module) else module.rpartition(".")[0]


def _opens(doors: tuple[str, ...], source: str, target: str) -> bool:
    return target == source or target.startswith(source + ".") or any(
        target == door.removesuffix(".*")
        or (door.endswith(".*") and target.startswith(door.removesuffix("*")))
        for door in doors)


def undeclared_edges(graph: dict[str, set[str]], doors: dict[str, tuple[str, ...]]
                     ) -> list[str]:
    """Every import through no declared door, as `module -> module (package -> package)`."""
    found = []
    for module, targets in sorted(graph.items()):
        source = _package(module)
        for target in sorted(targets):
            never = [why for (a, b), why in NEVER.items()
                     if (module + ".").startswith(a + ".") and (target + ".").startswith(b + ".")]
            if (module, target) in KNOWN_EXCEPTIONS or (
                    _opens(doors.get(source, ()), source, _package(target)) and not never):
                continue
            found.append(f"{module} -> {target} ({source} -> {_package(target)})")
    return found


def _packages() -> set[str]:
    return {_package(module) for module in _modules()}


def test_every_import_goes_through_a_declared_door():
    assert undeclared_edges(_graph(), DOORS) == []


def test_every_package_has_a_door_row_and_every_row_a_package():
    assert sorted(_packages() ^ set(DOORS)) == []


def test_a_new_undeclared_edge_fails_and_a_declared_one_passes():
    graph = {"tasks.report.page": {"tasks.regression.deltas", "judges.base",
                                   "tasks.report.view", "tasks.storage.outputs"},
             "judges.model.llm": {"judges.model.batch.broker"}}
    assert undeclared_edges(graph, DOORS) == [
        "tasks.report.page -> tasks.storage.outputs (tasks.report -> tasks.storage)"]
    # judges.* is storage's door, but never the engine
    assert undeclared_edges({"tasks.storage.chunk_store": {"judges.engine", "judges.rows"}},
                            DOORS) == ["tasks.storage.chunk_store -> judges.engine "
                                       "(tasks.storage -> judges)"]


def test_every_known_exception_is_still_an_import():
    graph = _graph()
    assert [edge for edge in KNOWN_EXCEPTIONS if edge[1] not in graph.get(edge[0], ())] == []


MAP_DOC = ROOT / "docs" / "execution.md"


def map_entries(text: str) -> set[str]:
    """The folders docs/execution.md's map names, as paths: `run/` under `flows/` is flows/run."""
    block = text.split("## The map", 1)[1].split("```", 2)[1]
    found, stack = set(), []
    for line in block.splitlines():
        name = line.strip().split(" ", 1)[0]
        if not name.endswith("/"):
            continue  # a description's continuation line
        depth = (len(line) - len(line.lstrip(" "))) // 2
        stack[depth:] = [name.rstrip("/")]
        found.add("/".join(stack))
    return found


def test_the_docs_map_names_every_package_and_only_packages():
    folders = {str(init.parent.relative_to(ROOT)) for layer in (*LAYERS, "prompts")
               for init in (ROOT / layer).rglob("__init__.py")}
    named = map_entries(MAP_DOC.read_text())
    assert {"missing from the map": sorted(folders - named),
            "no such package": sorted(named - folders)} == {
        "missing from the map": [], "no such package": []}


def test_the_map_reader_reads_nesting():
    text = "## The map\n\n```\nflows/    a\n          more\n  run/    b\n    x/  c\n" \
           "  shards/ d\ntasks/  e\n```\n"
    assert map_entries(text) == {"flows", "flows/run", "flows/run/x", "flows/shards", "tasks"}


def test_no_folder_holds_more_than_16_modules():
    crowded = {str(folder.relative_to(ROOT)): count
               for layer in LAYERS for folder in [ROOT / layer, *(ROOT / layer).iterdir()]
               if folder.is_dir() and folder.name != "__pycache__"
               and (count := len([p for p in folder.glob("*.py")
                                  if p.name != "__init__.py"])) > MAX_MODULES_PER_FOLDER}
    assert crowded == {}


def test_no_module_re_exports_a_name_it_imports_from_another():
    """A name lives in one module and is imported from there (no `__all__` of borrowed names)."""
    offenders = []
    for name, path in _modules().items():
        tree = _tree(path)
        borrowed = {alias.asname or alias.name for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module
                    and node.module.split(".")[0] in LAYERS for alias in node.names}
        for node in tree.body:
            if (isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)
                    and isinstance(node.value, ast.List | ast.Tuple)):
                offenders += [f"{name}: {e.value}" for e in node.value.elts
                              if isinstance(e, ast.Constant) and e.value in borrowed]
    assert offenders == []


def test_the_model_door_is_the_only_litellm_import():
    importers = [name for name, path in _modules().items()
                 if any(n == "litellm" or n.startswith("litellm.")
                        for n in _all_imports(path))]
    # judges.model.llm is the model layer's door; judges.model.litellm_door is the one module
    # behind it that touches litellm.
    assert importers == ["judges.model.litellm_door"]


def _all_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


# Published names are written by the package judges/result_names/ (one module per family of
# names) and read back by the package judges/names/ (metric fields, calibration, head-to-head);
# every other module works on typed values and asks those for any name it needs.
WRITER, READER = "judges.result_names", "judges.names"
DATABRICKS_PARTS = ("/rating", "/rationale", "/error_message", "/precision", "/rated_count",
                    "/error_count", "/unjudged_chunk_count", "/verdicts", "/average",
                    "/percentage")
PAIRWISE_AREA, CALIBRATION_AREA = "pairwise/", "calibration/"


class Literals:
    """A module's strings as code uses them (docstrings left out, since they only explain)."""

    def __init__(self, path: Path):
        tree = _tree(path)
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                                    | ast.AsyncFunctionDef)
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        self.template_parts: list[str] = []  # the fixed text of f-strings
        self.constants: list[str] = []
        self.keys_written: list[str] = []  # dict display keys and stored subscripts
        self.names: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                self.template_parts += [v.value for v in node.values
                                        if isinstance(v, ast.Constant)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) not in docstrings:
                    self.constants.append(node.value)
            elif isinstance(node, ast.Dict):
                self.keys_written += [k.value for k in node.keys
                                      if isinstance(k, ast.Constant) and isinstance(k.value, str)]
            elif (isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.slice, ast.Constant)):
                self.keys_written.append(node.slice.value)
            elif isinstance(node, ast.Name | ast.alias):
                self.names.add(node.id if isinstance(node, ast.Name) else node.name)


@functools.cache
def _literals(path: Path) -> Literals:
    return Literals(path)


def _modules_where(found) -> list[str]:
    """The modules whose literals `found` accepts; the writer's and the reader's modules as one."""
    return sorted({next((p for p in (WRITER, READER) if name.startswith(p + ".")), name)
                   for name, path in _modules().items() if found(_literals(path))})


def test_databricks_names_are_written_in_one_module_and_read_in_one():
    composers = _modules_where(lambda lit: any(
        part in text for text in lit.template_parts for part in DATABRICKS_PARTS))
    assert composers == sorted([WRITER, READER])


def test_pairwise_names_are_written_in_one_module():
    published = set(pairwise_metric_fields(
        pairwise_summary([])._replace(position_1_rate=None, swap_disabled=False)))
    assert set(NOVA_FIELDS) <= published  # nova_results.json takes its names from here too
    writers = _modules_where(lambda lit: published & set(lit.keys_written))
    assert writers == [WRITER]
    prefixed = _modules_where(lambda lit: any(
        text.startswith(PAIRWISE_AREA) or "forward/" in text or "backward/" in text
        for text in [*lit.constants, *lit.template_parts]))
    assert prefixed == [WRITER]


# Published pairwise names that are also everyday words ("score", "ties"): a module may use those
# for its own purposes, so only the unmistakable names are looked for.
EVERYDAY_WORDS = frozenset({"score", "ties"})


def test_no_module_reads_a_pairwise_name_as_a_literal_outside_the_writer_and_the_reader():
    published = set(pairwise_metric_fields(
        pairwise_summary([])._replace(position_1_rate=None, swap_disabled=False)))
    published |= {WINRATE_NOTE, LC_NOTE} | set(LENGTH_CONTROL_NAMES)
    names = published - EVERYDAY_WORDS
    readers = _modules_where(lambda lit: names & set(lit.constants))
    assert readers == sorted([WRITER, READER])


def test_calibration_names_are_written_in_one_module_and_read_in_one():
    users = _modules_where(lambda lit: "CALIBRATION_AREA" in lit.names or any(
        text.startswith(CALIBRATION_AREA) for text in [*lit.constants, *lit.template_parts]))
    assert users == sorted([WRITER, READER])
