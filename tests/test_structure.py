"""The package's rooms (tfcourse.interface lists them): imports between its modules, lazy ones
included, make no cycle, and the loop and the data never reach up to a model."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[1] / "tfcourse"
MODULES = {p.stem: p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}


def imports(module):
    """The tfcourse modules that `module` imports, wherever the import stands."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tfcourse."):
            found.add(node.module.split(".")[1])
        elif isinstance(node, ast.ImportFrom) and node.module == "tfcourse":
            found |= {alias.name for alias in node.names}
    return found & set(MODULES)


def reach(module):
    seen, todo = set(), [module]
    while todo:
        for name in imports(todo.pop()) - seen:
            seen.add(name)
            todo.append(name)
    return seen


def test_no_module_imports_itself_through_others():
    cycles = sorted(m for m in MODULES if m in reach(m))
    assert not cycles, f"import cycles through {cycles}"


def test_the_loop_and_the_data_never_reach_a_model():
    models = {"model", "variants", "encoder", "decoder"}
    for module in ("training", "checkpoint", "losses", "schedules", "vocab", "interface",
                   "device", "inference"):
        assert not reach(module) & models, (module, reach(module) & models)
