"""The layers of docs/architecture.md hold: the pure packages stay pure, the store imports nothing above
it, no two modules import each other (directly or round a longer circle), and only store/keys.py builds
key strings.

Every import counts: absolute and relative, at the top of a module and inside a function (a lazy import
is still a dependency).
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEY_LITERAL = re.compile(r"""["']dispatch:[a-z]+:|\{(self\.)?ns\}:""")
#: What a pure package must not reach: the server, the queue, the wire format, the clock, the OS, chance.
FORBIDDEN = {"redis", "rq", "pynvml", "time", "os", "socket", "subprocess", "threading", "random", "datetime",
             "msgpack", "pathlib", "shutil", "signal", "fcntl"}
PURE = ("dispatcher.core", "dispatcher.policy", "dispatcher.sim")
#: What each layer may import inside the project (itself always).
ALLOWED = {
    "dispatcher.core": {"dispatcher.core"},
    "dispatcher.policy": {"dispatcher.core"},
    "dispatcher.sim": {"dispatcher.core", "dispatcher.policy"},
    "dispatcher.clock": set(),
    "dispatcher.begin": {"dispatcher.core"},  # local time, beside the clock
    "dispatcher.config": {"dispatcher.core"},
    "dispatcher.auth": {"dispatcher.core", "dispatcher.clock", "dispatcher.config"},
    "dispatcher.store": {"dispatcher.core", "dispatcher.clock", "dispatcher.begin", "dispatcher.config",
                         "dispatcher.auth"},
}


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def _project_modules() -> dict[str, Path]:
    files = sorted((ROOT / "dispatcher").rglob("*.py")) + sorted((ROOT / "workers").rglob("*.py"))
    return {_module_name(f)[0]: f for f in files}


MODULES = _project_modules()


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, as absolute dotted names (a name imported from a package counts as
    the submodule when there is one)."""
    name, is_package = _module_name(path)
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in MODULES}
    return found


def _internal(path: Path) -> set[str]:
    return {m for m in _imports(path) if m in MODULES and m != _module_name(path)[0]}


def _layer(module: str) -> str | None:
    return next((layer for layer in ALLOWED if module == layer or module.startswith(layer + ".")), None)


def test_the_pure_packages_import_nothing_that_reaches_redis_rq_msgpack_the_clock_the_os_or_chance():
    bad = {}
    for module, f in MODULES.items():
        if _layer(module) in PURE:
            reached = {m.split(".")[0] for m in _imports(f)} & FORBIDDEN
            if reached:
                bad[module] = sorted(reached)
    assert bad == {}


def test_each_layer_imports_only_the_layers_below_it():
    bad = {}
    for module, f in MODULES.items():
        layer = _layer(module)
        if layer is None:
            continue
        above = {m for m in _internal(f) if _layer(m) not in ALLOWED[layer] | {layer}}
        if above:
            bad[module] = sorted(above)
    assert bad == {}


def test_no_import_circles():
    graph = {module: _internal(f) for module, f in MODULES.items()}
    # A package's __init__ importing its own submodules is how a package exports; that edge is not a circle.
    for module in graph:
        graph[module] = {m for m in graph[module] if not m.startswith(module + ".")}
    circles, state = [], {}

    def visit(module, path):
        state[module] = "open"
        for nxt in sorted(graph[module]):
            if state.get(nxt) == "open":
                circles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_no_module_but_keys_builds_a_key_string():
    offenders = []
    for f in MODULES.values():
        if f.name == "keys.py":
            continue
        if KEY_LITERAL.search(f.read_text()):
            offenders.append(str(f.relative_to(ROOT)))
    assert offenders == []
