"""The package's shape: imports point one way, cli, web and bridges -> façade -> ops and jobs ->
worker -> flow -> store -> base (base/, config, errors, context), and no modules import each
other in a circle.

Read from the source with ast, so a lazy import inside a function counts as much as one at
the top: a cycle hidden in a function body still ties two layers together.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "delayq"

# Lower numbers sit lower; a module may import its own layer or any layer below it.
LAYERS = {
    "base": 0,
    "store": 1,
    "flow": 2,  # flow control: above the store it calls, below the worker that meets it
    "worker": 3,
    "ops": 4,
    "jobs": 4,  # what a producer asks of jobs, behind the Queue, beside the operator's ops
    "facade": 5,
    "cli": 6,
    "web": 6,  # the page sits beside the command line, on the same Queue
    "bridges": 6,  # jobs from systems that are not delayq producers, through the Queue
}
# Modules at the package's top that every layer uses: the public ones of the base layer.
BASE_MODULES = {"config", "errors", "context"}
FOLDERS = {"base", "store", "flow", "worker", "ops", "jobs", "cli", "web", "bridges"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "facade"  # delayq/__init__.py: the public face
    if parts[1] == "__main__":
        return "cli"  # `python -m delayq` is the command line
    if parts[1] in FOLDERS:
        return parts[1]
    if parts[1] in BASE_MODULES:
        return "base"
    return "facade"  # queue.py, connection.py


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """Every module of the package that `path` imports, wherever the import statement is."""
    this = module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            submodules = [f"{target}.{alias.name}" for alias in node.names]
            # `from . import context` imports the module, not the package's __init__.
            names_only = not all(name in modules for name in submodules)
            candidates = submodules + ([target] if names_only else [])
        elif isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        else:
            continue
        found |= {name for name in candidates if name in modules and name != this}
    return found


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    modules = set(paths)
    graph = {name: imported_modules(path, modules) for name, path in paths.items()}
    # A package's __init__ importing its own modules is how a package is put together.
    return {
        name: {target for target in targets if not target.startswith(name + ".")}
        for name, targets in graph.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that returns to its start, or None."""
    visiting: list[str] = []
    done: set[str] = set()

    def visit(name: str) -> list[str] | None:
        if name in visiting:
            return visiting[visiting.index(name) :] + [name]
        if name in done:
            return None
        visiting.append(name)
        for target in sorted(graph.get(name, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        visiting.pop()
        done.add(name)
        return None

    for name in sorted(graph):
        cycle = visit(name)
        if cycle:
            return cycle
    return None


def test_the_package_has_no_import_cycle() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_imports_point_down_the_layers() -> None:
    upward = [
        f"{name} ({layer_of(name)}) imports {target} ({layer_of(target)})"
        for name, targets in sorted(import_graph().items())
        for target in sorted(targets)
        if LAYERS[layer_of(target)] > LAYERS[layer_of(name)]
    ]
    assert upward == []


FACES = ("delayq.store.table", "delayq.store.index")


def test_outside_the_store_its_two_faces_are_the_doors() -> None:
    """Code above the store imports what store/table/ and store/index/ offer from the package
    (its __init__ names the repositories and values), never one of their modules: what a
    face keeps inside can move without a change above it."""
    through_a_side_door = [
        f"{name} imports {target}"
        for name, targets in sorted(import_graph().items())
        if not name.startswith("delayq.store")
        for target in sorted(targets)
        if target.startswith(tuple(face + "." for face in FACES))
    ]
    assert through_a_side_door == []


def test_the_index_face_does_not_import_the_table_face() -> None:
    """The table face may use the index's values (its keys, its packing, its labels); the
    index never reads the table. One direction, so that importing either face first works."""
    backwards = [
        f"{name} imports {target}"
        for name, targets in sorted(import_graph().items())
        if name.startswith("delayq.store.index")
        for target in sorted(targets)
        if target.startswith("delayq.store.table")
    ]
    assert backwards == []


@pytest.mark.parametrize("module", ["delayq", *FACES, "delayq.cli", "delayq.web.app"])
def test_each_door_imports_first_in_a_fresh_interpreter(module: str) -> None:
    """A face's __init__ imports every module of its face: a cycle between the faces shows only
    in the order a fresh interpreter meets them, which the graph above does not model."""
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_the_web_page_does_not_import_the_command_line() -> None:
    """`delayq web` starts the page, but what both need (printable, say) lives below them."""
    crossing = [
        f"{name} imports {target}"
        for name, targets in sorted(import_graph().items())
        for target in sorted(targets)
        if layer_of(name) == "web" and layer_of(target) == "cli"
    ]
    assert crossing == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("delayq", "facade"),
        ("delayq.queue", "facade"),
        ("delayq.errors", "base"),
        ("delayq.base.durations", "base"),
        ("delayq.jobs.spec", "jobs"),
        ("delayq.bridges.keyspace", "bridges"),
        ("delayq.store.table", "store"),
        ("delayq.flow.gate", "flow"),
        ("delayq.worker.run", "worker"),
        ("delayq.ops.overview", "ops"),
        ("delayq.cli.app", "cli"),
        ("delayq.web.pages", "web"),
    ],
)
def test_modules_fall_in_their_folders_layer(module: str, layer: str) -> None:
    assert layer_of(module) == layer


# The package's top: what a user imports, and `python -m delayq`. Everything else has a
# folder named for what it is (base/, jobs/, flow/, store/, worker/, ops/, ...).
PUBLIC_FACE = {
    "__init__.py",
    "__main__.py",
    "queue.py",
    "connection.py",
    "config.py",
    "errors.py",
    "context.py",
}


def test_the_top_level_holds_the_public_surface() -> None:
    assert {path.name for path in PACKAGE.glob("*.py")} == PUBLIC_FACE


def test_no_module_is_longer_than_four_hundred_lines() -> None:
    long = {
        module_name(path): len(path.read_text().splitlines())
        for path in PACKAGE.rglob("*.py")
        if len(path.read_text().splitlines()) > 400
    }
    assert long == {}


FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def oversized(tree: ast.AST) -> dict[str, int]:
    """Classes of more than 20 methods and function bodies of more than 60 lines: {name: size}."""
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods = [child for child in node.body if isinstance(child, FUNCTIONS)]
            if len(methods) > 20:
                found[f"class {node.name}"] = len(methods)
        elif isinstance(node, FUNCTIONS):
            length = (node.end_lineno or 0) - node.body[0].lineno + 1
            if length > 60:
                found[f"def {node.name}"] = length
    return found


# The façade is the public API, a method for each thing a user asks (the README's, and
# AsyncQueue's list): it may hold more than twenty, because each does no work of its own.
FACADE = "delayq.queue: class Queue"
FACADE_STATEMENTS = 6  # statements a façade method may hold, nested ones too, docstring aside


def test_no_class_has_more_than_twenty_methods_nor_a_function_sixty_lines() -> None:
    found = {
        f"{module_name(path)}: {name}": size
        for path in PACKAGE.rglob("*.py")
        for name, size in oversized(ast.parse(path.read_text())).items()
    }
    assert found.pop(FACADE, 0) > 20, "the façade fits the rule now: drop its exception"
    assert found == {}


def facade_bodies(tree: ast.AST) -> dict[str, int]:
    """{method: statements in its body, nested ones too, the docstring aside} of class Queue
    in `tree`."""
    queue = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "Queue")
    bodies = {}
    for method in (node for node in queue.body if isinstance(node, FUNCTIONS)):
        body = method.body
        if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]
        bodies[method.name] = sum(
            isinstance(node, ast.stmt) for statement in body for node in ast.walk(statement)
        )
    return bodies


def test_the_facade_hands_every_call_to_the_part_that_owns_it() -> None:
    """Queue's methods check what they are given and hand the work on (jobs/, flow/, ops/,
    worker/): a method that grows past a hand-off is work that belongs in one of those."""
    bodies = facade_bodies(ast.parse((PACKAGE / "queue.py").read_text()))
    assert {name: size for name, size in bodies.items() if size > FACADE_STATEMENTS} == {}


def test_the_facade_check_counts_statements_without_the_docstring() -> None:
    source = (
        "class Queue:\n"
        "    def a(self):\n"
        '        """Doc."""\n'
        "        x = f(\n            1,\n        )\n"
        "        for y in x:\n            g(y)\n"
        "        return x\n"
    )
    assert facade_bodies(ast.parse(source)) == {"a": 4}


def test_the_size_check_finds_a_large_class_and_a_long_function() -> None:
    methods = "\n".join(f"    def m{n}(self): pass" for n in range(21))
    body = "\n".join(f"    x{n} = {n}" for n in range(61))
    tree = ast.parse(f"class C:\n{methods}\ndef f():\n{body}\n")
    assert oversized(tree) == {"class C": 21, "def f": 61}


def test_the_map_in_docs_internals_names_each_module_in_its_folders_row() -> None:
    """A newcomer finds every module in docs/internals.md's map, under the folder it is in, and
    the map names no module that is gone."""
    named: dict[str, set[str]] = {}
    for line in (PACKAGE.parent / "docs" / "internals.md").read_text().splitlines():
        row = re.match(r"\| `(?:delayq/([\w/]*?)/?|config\.py)`", line)
        if row is None:
            continue
        for module in re.findall(r"`(\w+\.py)`", line):
            folder = "" if module == "__main__.py" else row.group(1) or ""
            named.setdefault(folder, set()).add(module)
    present: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            folder = path.parent.relative_to(PACKAGE).as_posix().strip(".")
            present.setdefault(folder, set()).add(path.name)
    folders = sorted(named.keys() | present.keys())
    unnamed = {f: m for f in folders if (m := present.get(f, set()) - named.get(f, set()))}
    gone = {f: m for f in folders if (m := named.get(f, set()) - present.get(f, set()))}
    assert not unnamed, f"modules the map does not name: {unnamed}"
    assert not gone, f"modules the map names that are not there: {gone}"


# What SQL looks like from Python: a transaction, a statement, the model's query builder, the
# database itself, a retry of a transaction, and the drivers. Every one belongs in store/table/.
SQL_ATTRIBUTES = {"atomic", "execute_sql", "model", "db"}
SQL_MODULES = {"peewee", "playhouse", "pymysql", "MySQLdb", "sqlite3"}
SQL_NAMES = {"run_reconnecting", "Job", "fn"}


def sql_in(tree: ast.AST) -> list[str]:
    """Each use of SQL or the database in a module: "line N: what" (".db =": an attribute
    assigned, not read)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in SQL_ATTRIBUTES:
            assigned = " =" if isinstance(node.ctx, ast.Store) else ""
            found.append(f"line {node.lineno}: .{node.attr}{assigned}")
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
            found += [f"line {node.lineno}: import {name}" for name in modules if _sql_module(name)]
        elif isinstance(node, ast.ImportFrom):
            if not node.level and _sql_module(node.module or ""):
                found.append(f"line {node.lineno}: from {node.module}")
            names = [alias.name for alias in node.names if alias.name in SQL_NAMES]
            found += [f"line {node.lineno}: import of {name}" for name in names]
    return found


def _sql_module(name: str) -> bool:
    return name.split(".")[0] in SQL_MODULES


TABLE_FACE = PACKAGE / "store" / "table"
# The uses of the drivers outside store/table/ that hold no SQL, each with why: {module: {use
# as sql_in words it, without its line: reason}}. Nothing else outside store/table/ may use one.
NOT_SQL = {
    "delayq.store.backend_errors": {
        "import peewee": "its error classes alone, to tell what an error of either face (the "
        "table or Redis) means at the Queue's boundary; it sends no statement (whether the "
        "table exists is the Table's question, Table.exists)",
    },
    "delayq.store.urls": {
        "import pymysql": "PyMySQL reads a database URL's connection arguments without "
        "connecting (defer_connect), checked beside the Redis URLs before anything connects",
    },
    "delayq.queue": {
        ".db =": "Queue keeps the database it was given as Queue.db, for an application's "
        "and the tests' SQL of their own; delayq reads no attribute .db outside store/table/: "
        "it reaches the database through Queue.table",
    },
}


def test_only_the_table_face_holds_sql() -> None:
    """Every statement, transaction and query delayq makes is a method or function of
    store/table/ named for its intent (a repository such as `Maintenance` or `QueueFigures`,
    or `Table` itself), so the SQL can be read in one place: worker/ runs jobs, ops/ decides,
    pages and words, and neither builds a query."""
    found = {
        module_name(path): left
        for path in sorted(PACKAGE.rglob("*.py"))
        if not path.is_relative_to(TABLE_FACE)
        and (left := _unexplained(module_name(path), sql_in(ast.parse(path.read_text()))))
    }
    assert found == {}


def _unexplained(module: str, uses: list[str]) -> list[str]:
    allowed = NOT_SQL.get(module, {})
    return [use for use in uses if use.partition(": ")[2] not in allowed]


def test_each_use_the_sql_check_allows_is_still_there() -> None:
    """An allowance for a use that is gone would quietly let the next one in."""
    found = {
        module: {use.partition(": ")[2] for use in sql_in(ast.parse(_source_of(module)))}
        for module in NOT_SQL
    }
    assert {module: set(uses) - found[module] for module, uses in NOT_SQL.items()} == {
        module: set() for module in NOT_SQL
    }


def _source_of(module: str) -> str:
    path = PACKAGE.parent.joinpath(*module.split("."))
    return (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text()


def test_the_sql_check_finds_sql() -> None:
    source = (
        "import peewee\n"
        "from ..store.database import run_reconnecting\n"
        "with table.db.atomic():\n"
        "    table.model.select()\n"
        "db.execute_sql('SELECT 1')\n"
        "self.due_by_id.update(x)\n"
        "self.db = db\n"
        "self.database_number = 15\n"
    )
    assert sorted(sql_in(ast.parse(source))) == [
        "line 1: import peewee",
        "line 2: import of run_reconnecting",
        "line 3: .atomic",
        "line 3: .db",
        "line 4: .model",
        "line 5: .execute_sql",
        "line 7: .db =",
    ]
