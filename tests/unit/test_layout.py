"""The layout of daemon/apid, as docs/architecture.md draws it, pinned: small modules, the public
face alone at the top, package `__init__`s that import nothing (so that importing one module of a
package loads only what that module needs), log namespaces that outlive a move, and a pytest
plugin that loads neither a reactor nor Klein. The imports between the packages are pinned by the
layering contract (`lint-imports`, `make check`)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

APID = Path(__file__).resolve().parents[2] / "daemon" / "apid"
MAX_LINES = 600
# What plugins import, beside the packages; everything else lives in a package named for its concern.
PUBLIC_MODULES = frozenset({"__init__.py", "__main__.py", "plugin.py", "records.py", "problems.py"})
# The packages whose `__init__` holds code: the kit's lazy facade, and those that had code there
# before the move. Every other `__init__` is its docstring, saying what the package owns.
INIT_WITH_CODE = frozenset(
    {
        "apid.testing",
        "apid.iostate",
        "apid.openapi.docs_page",
        "apid.server.workers",
        "apid.plugin_host.scaffold",
        "apid.private_apis",
    }
)
# Every log namespace: those before the move into packages, and each added since (operators filter on them).
LOG_NAMESPACES = frozenset(
    {
        "apid.access",
        "apid.accounts",
        "apid.apikeys",
        "apid.app",
        "apid.auth.identities",
        "apid.auth.jwks",
        "apid.auth.limits",
        "apid.caching",
        "apid.cli",
        "apid.coroutines",
        "apid.daemon",
        "apid.dispatch",
        "apid.events",
        "apid.hooks",
        "apid.http",
        "apid.lifecycle",
        "apid.mail",
        "apid.metrics",
        "apid.pipeline",
        "apid.plugins",
        "apid.proxies",
        "apid.reactor",
        "apid.record_access",
        "apid.reloading",
        "apid.routes",
        "apid.sessions",
        "apid.shutdown",
        "apid.store.database",
        "apid.store.redis",
        "apid.systemd",
        "apid.throttle",
        "apid.workers",
    }
)
# The one Logger whose namespace is not written: standard logging's records, each under its own name.
LOGGING_BRIDGE = APID / "server" / "logs.py"


def modules() -> list[Path]:
    return sorted(APID.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(APID.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_is_over_600_lines():
    lines = {str(path.relative_to(APID)): len(path.read_text().splitlines()) for path in modules()}
    long = {name: count for name, count in lines.items() if count > MAX_LINES}
    assert not long, f"split these by concern: {long}"


def test_the_top_level_holds_the_public_modules_and_packages_only():
    files = {path.name for path in APID.iterdir() if path.suffix == ".py"}
    folders = {path for path in APID.iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert files == PUBLIC_MODULES
    assert all((folder / "__init__.py").is_file() for folder in folders), folders


def test_package_inits_hold_their_docstring_only():
    with_code = set()
    for init in APID.rglob("__init__.py"):
        body = ast.parse(init.read_text()).body
        assert body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant), (
            f"{module_name(init)} says in a docstring what the package owns"
        )
        if body[1:]:
            with_code.add(module_name(init))
    assert with_code == INIT_WITH_CODE


def test_every_logger_names_its_namespace_and_the_namespaces_are_unchanged():
    namespaces = set()
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Logger"):
                continue
            named = {keyword.arg: keyword.value for keyword in node.keywords}
            assert "namespace" in named, f"{path.relative_to(APID)}:{node.lineno}: Logger() without a namespace"
            value = named["namespace"]
            if isinstance(value, ast.Constant):
                namespaces.add(value.value)
            else:
                assert path == LOGGING_BRIDGE, f"{path.relative_to(APID)}:{node.lineno}: a namespace not written"
    assert namespaces == LOG_NAMESPACES


def test_the_pytest_plugin_loads_no_reactor_and_no_klein():
    """It loads in every pytest session where apid is installed (the pytest11 entry point): a
    reactor installed there would be the wrong one for a test that installs its own."""
    code = (
        "import sys, apid.testing.pytest_plugin\n"
        "print(sorted(m for m in sys.modules if m == 'klein' or m.startswith('klein.')\n"
        "    or (m.startswith('twisted.internet.') and m.endswith('reactor'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_a_constructor_of_more_than_three_parameters_takes_them_by_keyword():
    """Three adjacent `str`s or eleven services in a row are a mistake waiting in every caller."""
    positional = []
    for path in APID.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                for init in node.body:
                    if isinstance(init, ast.FunctionDef) and init.name == "__init__":
                        count = len(init.args.posonlyargs) + len(init.args.args) - 1
                        if count + len(init.args.kwonlyargs) > 3 and count > 3:
                            positional.append(f"{path.relative_to(APID)}: {node.name}")
    assert positional == []
