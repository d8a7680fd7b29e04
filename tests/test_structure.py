"""The structure the design promises, read from the code: imports go one way, without cycles."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("flows", "tasks", "judges")  # each may import only the layers after it


def _modules() -> dict[str, Path]:
    return {
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): path
        for layer in LAYERS
        for path in (ROOT / layer).glob("*.py")
    }


def _imports(path: Path) -> set[str]:
    """Every project module `path` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {name for name in names if name.split(".")[0] in LAYERS}
    return found


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


def test_the_model_door_is_the_only_litellm_import():
    importers = [name for name, path in _modules().items()
                 if any(n == "litellm" or n.startswith("litellm.")
                        for n in _all_imports(path))]
    # judges.llm is the model layer's door; judges.litellm_door is the one module behind it
    # that touches litellm.
    assert importers == ["judges.litellm_door"]


def _all_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
    return names


def test_databricks_judge_names_are_written_in_one_module():
    writers = [name for name, path in _modules().items()
               if '"{prefix}/rating"' in path.read_text().replace("f\"", "\"")
               or 'f"{prefix}/rating"' in path.read_text()]
    assert writers == ["judges.result_names"]
