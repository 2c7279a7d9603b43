"""The policy core stays pure, and only store/keys.py builds key strings."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEY_LITERAL = re.compile(r"""["']dispatch:[a-z]+:|\{(self\.)?ns\}:""")
FORBIDDEN = {"redis", "rq", "pynvml", "time", "os", "socket", "subprocess", "threading", "random", "datetime",
             "msgpack"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_policy_and_simulator_packages_import_nothing_from_redis_rq_pynvml_time_or_os():
    files = sorted((ROOT / "dispatcher" / "policy").rglob("*.py")) + sorted((ROOT / "dispatcher" / "sim").rglob("*.py"))
    assert files
    bad = {str(f.relative_to(ROOT)): sorted(_imports(f) & FORBIDDEN) for f in files if _imports(f) & FORBIDDEN}
    assert bad == {}


def test_the_policy_package_reaches_only_pure_modules_inside_dispatcher():
    pure = ("model", "cycle", "errors", "spec")  # plain data and checks: none imports I/O (checked below)
    for f in sorted((ROOT / "dispatcher" / "policy").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 2:
                assert node.module in pure, f"{f.name} imports dispatcher.{node.module}"
    for name in pure:
        assert not _imports(ROOT / "dispatcher" / f"{name}.py") & FORBIDDEN, name


def test_no_module_but_keys_builds_a_key_string():
    offenders = []
    for f in sorted((ROOT / "dispatcher").rglob("*.py")) + sorted((ROOT / "workers").rglob("*.py")):
        if f.name == "keys.py":
            continue
        if KEY_LITERAL.search(f.read_text()):
            offenders.append(str(f.relative_to(ROOT)))
    assert offenders == []
