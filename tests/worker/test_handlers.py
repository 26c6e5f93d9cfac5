"""delayq.handlers: what resolve may import and call, and everything it must refuse.

No backend here: resolving a handler touches neither the table nor Redis. Refusals are
checked for their error class (HandlerNotAllowed for a path the allowlist forbids, plain
BadInput for a path that is allowed but broken) and for leaving sys.modules untouched.
"""

from __future__ import annotations

import sys

import pytest

from delayq.errors import BadInput, ConfigError, HandlerNotAllowed
from delayq.worker.allowlist import check_allowlist
from delayq.worker.handlers import check_allowed, locate, resolve
from tests.sample_handlers import foreign_base, jobs, shapes

ALLOWED = ("tests.sample_handlers",)
SHAPES = "tests.sample_handlers.shapes"
LEAKY = "tests.sample_handlers.leaky"


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> type[shapes.Counter]:
    """shapes.Counter with its instance count back at zero."""
    monkeypatch.setattr(shapes.Counter, "created", 0)
    return shapes.Counter


@pytest.fixture
def forget_module(monkeypatch: pytest.MonkeyPatch):
    """Remove a module from sys.modules for this test, so a later import would show."""

    def forget(name: str) -> str:
        monkeypatch.delitem(sys.modules, name, raising=False)
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            monkeypatch.delattr(sys.modules[parent], child, raising=False)
        return name

    return forget


def test_module_function_under_the_allowlist_resolves_to_that_function():
    handler = resolve("tests.sample_handlers.jobs", "echo", ALLOWED)

    assert handler is jobs.echo
    assert handler({"n": 1}) == {"n": 1}


def test_a_longer_prefix_than_the_package_also_allows_its_module():
    handler = resolve(SHAPES, "plain", ("tests.sample_handlers.shapes",))

    assert handler(3) == {"plain": 3}


def test_plain_method_is_bound_to_a_fresh_instance_created_without_arguments(counter):
    handler = resolve(f"{SHAPES}.Counter", "bump", ALLOWED)

    assert counter.created == 1
    assert isinstance(handler.__self__, counter)
    assert handler("x") == ("bump", 1, "x")
    resolve(f"{SHAPES}.Counter", "bump", ALLOWED)
    assert counter.created == 2


def test_instance_method_of_the_sample_refund_class_sees_its_constructor_state(tmp_path):
    handler = resolve("tests.sample_handlers.jobs.Refund", "run", ALLOWED)

    assert handler({"log": str(tmp_path / "log"), "order": 9}) == "refunded 9"


def test_static_method_is_called_on_the_class_without_an_instance(counter):
    handler = resolve(f"{SHAPES}.Counter", "fixed", ALLOWED)

    assert handler(5) == ("static", 5)
    assert counter.created == 0


def test_class_method_is_bound_to_the_class_without_an_instance(counter):
    handler = resolve(f"{SHAPES}.Counter", "build", ALLOWED)

    assert handler.__self__ is counter
    assert handler(5) == ("Counter", 5)
    assert counter.created == 0


def test_locate_finds_an_instance_method_without_creating_an_instance(counter):
    owner, found = locate(f"{SHAPES}.Counter", "bump", ALLOWED)

    assert owner is counter
    assert found is counter.__dict__["bump"]
    assert counter.created == 0


def test_class_that_needs_constructor_arguments_is_bad_input_naming_the_class():
    with pytest.raises(BadInput, match="cannot be created without arguments") as caught:
        resolve(f"{SHAPES}.NeedsArguments", "run", ALLOWED)

    assert not isinstance(caught.value, HandlerNotAllowed)
    assert "NeedsArguments" in str(caught.value)


def test_empty_allowlist_refuses_everything_and_says_to_set_delayq_handlers():
    with pytest.raises(HandlerNotAllowed) as caught:
        resolve("tests.sample_handlers.jobs", "echo", ())

    message = str(caught.value)
    assert "DELAYQ_HANDLERS" in message
    assert "set it" in message


def test_prefix_match_stops_at_a_dot_boundary():
    with pytest.raises(HandlerNotAllowed, match="does not allow"):
        check_allowed("tests.sample_handlersX", "run", ALLOWED)
    with pytest.raises(HandlerNotAllowed, match="does not allow"):
        resolve("tests.sample_handlersX.jobs", "echo", ALLOWED)


def test_module_whose_name_merely_extends_an_allowed_prefix_is_never_imported(forget_module):
    name = forget_module("tests.sample_handlers.side_effect")

    with pytest.raises(HandlerNotAllowed, match="does not allow"):
        resolve(name, "run", ("tests.sample_handlers.side",))

    assert name not in sys.modules


def test_refused_stdlib_module_is_not_imported(forget_module):
    name = forget_module("tabnanny")

    with pytest.raises(HandlerNotAllowed, match="does not allow 'tabnanny'"):
        resolve(name, "check", ALLOWED)

    assert name not in sys.modules


def test_check_allowed_on_an_allowed_path_imports_nothing(forget_module):
    name = forget_module("tests.sample_handlers.side_effect")

    check_allowed(name, "run", ALLOWED)

    assert name not in sys.modules


@pytest.mark.parametrize(
    ("class_path", "method"),
    [
        (".jobs", "echo"),
        ("tests.sample_handlers.", "echo"),
        ("tests..sample_handlers.jobs", "echo"),
        ("a..b", "run"),
        ("", "run"),
        ("tests.sample_handlers.jobs", ""),
        ("tests.sample_handlers.jobs", "echo.__globals__"),
        ("tests.sample_handlers.jobs", "_append"),
        ("tests.sample_handlers.jobs", "__init__"),
        ("tests.sample_handlers.jobs", "__import__"),
        (LEAKY, "__builtins__"),
        ("tests.sample_handlers.__init__", "run"),
        ("tests.sample_handlers._private", "run"),
        ("tests.sample_handlers.jobs.Refund", "__class__"),
        ("tests.sample_handlers/jobs", "echo"),
        ("tests.sample_handlers.jobs ", "echo"),
    ],
)
def test_paths_that_are_not_plain_dotted_names_are_refused_before_any_import(class_path, method):
    with pytest.raises(HandlerNotAllowed, match="plain names"):
        resolve(class_path, method, ALLOWED + ("a",))


@pytest.mark.parametrize("method", ["system", "getoutput", "ALIAS"])
def test_foreign_callable_re_exported_by_an_allowed_module_is_refused(method):
    with pytest.raises(HandlerNotAllowed, match="outside DELAYQ_HANDLERS"):
        resolve(LEAKY, method, ALLOWED)


@pytest.mark.parametrize(
    ("class_path", "method"),
    [
        (f"{LEAKY}.os", "system"),
        (f"{LEAKY}.subprocess", "getoutput"),
        (f"{LEAKY}.os.path", "join"),
    ],
)
def test_path_that_walks_through_a_module_attribute_is_refused(class_path, method):
    with pytest.raises(HandlerNotAllowed, match="not a class"):
        resolve(class_path, method, ALLOWED)


@pytest.mark.parametrize("method", ["home", "cwd", "write_text"])
def test_foreign_class_re_exported_by_an_allowed_module_is_refused(method):
    with pytest.raises(HandlerNotAllowed, match="outside DELAYQ_HANDLERS"):
        resolve(f"{SHAPES}.Path", method, ALLOWED)


@pytest.mark.parametrize("method", ["clear", "update", "fromkeys"])
def test_method_inherited_from_a_builtin_base_is_refused(method):
    with pytest.raises(HandlerNotAllowed, match="outside DELAYQ_HANDLERS"):
        resolve(f"{SHAPES}.Inherits", method, ALLOWED)


def test_module_that_does_not_exist_under_an_allowed_package_is_bad_input_not_refusal():
    with pytest.raises(BadInput, match="does not exist") as caught:
        resolve("tests.sample_handlers.no_such_module", "run", ALLOWED)

    assert not isinstance(caught.value, HandlerNotAllowed)


def test_top_level_package_that_does_not_exist_is_bad_input_pointing_at_pythonpath():
    with pytest.raises(BadInput, match="PYTHONPATH") as caught:
        resolve("delayq_test_no_such_package.jobs", "run", ("delayq_test_no_such_package",))

    assert not isinstance(caught.value, HandlerNotAllowed)


def test_function_missing_from_an_allowed_module_is_bad_input():
    with pytest.raises(BadInput, match="does not exist") as caught:
        resolve("tests.sample_handlers.jobs", "no_such_function", ALLOWED)

    assert not isinstance(caught.value, HandlerNotAllowed)


def test_module_that_raises_while_importing_reports_its_own_error():
    with pytest.raises(BadInput) as caught:
        resolve("tests.sample_handlers.broken", "run", ALLOWED)

    assert not isinstance(caught.value, HandlerNotAllowed)
    assert "failed to import" in str(caught.value)
    assert "RuntimeError: broken on purpose" in str(caught.value)


def test_module_that_raises_while_importing_reports_it_when_named_as_a_class_path():
    with pytest.raises(BadInput, match="RuntimeError: broken on purpose"):
        resolve("tests.sample_handlers.broken.Thing", "run", ALLOWED)


def test_module_with_a_missing_dependency_reports_the_dependency():
    with pytest.raises(BadInput) as caught:
        resolve("tests.sample_handlers.missing_dependency", "run", ALLOWED)

    assert "failed to import" in str(caught.value)
    assert "delayq_test_no_such_dependency" in str(caught.value)


def test_missing_dependency_whose_name_prefixes_the_module_name_is_still_the_modules_error():
    # orders_v2 imports tests.sample_handlers.orders, which does not exist; the module itself
    # does exist, so this must read as its import failing, not as "does not exist".
    with pytest.raises(BadInput) as caught:
        resolve("tests.sample_handlers.orders_v2", "run", ALLOWED)

    assert "failed to import" in str(caught.value)
    assert "tests.sample_handlers.orders'" in str(caught.value)


FOREIGN = "tests.sample_handlers.foreign"


@pytest.fixture
def noted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What foreign_base's code noted running during the test, starting empty."""
    calls: list[str] = []
    monkeypatch.setattr(foreign_base, "CALLS", calls)
    return calls


@pytest.mark.parametrize(
    ("class_path", "method", "runs"),
    [
        (FOREIGN, "Spawner", "__init__ of subprocess.Popen"),
        (f"{FOREIGN}.WrappedPopen", "run", "__init__ of subprocess.Popen"),
        (f"{FOREIGN}.InheritsInit", "run", "__init__ of tests.sample_handlers.foreign_base"),
        (f"{FOREIGN}.InheritsNew", "run", "__new__ of tests.sample_handlers.foreign_base"),
        (f"{FOREIGN}.Metered", "run", "__call__ of tests.sample_handlers.foreign_base"),
        (FOREIGN, "InheritsInit", "__init__ of tests.sample_handlers.foreign_base"),
        (FOREIGN, "caller", "__call__ of tests.sample_handlers.foreign_base"),
    ],
)
def test_an_allowed_class_never_runs_a_constructor_or_call_from_outside_the_allowlist(
    class_path, method, runs, noted, tmp_path
):
    with pytest.raises(HandlerNotAllowed, match=f"would run {runs}") as caught:
        handler = resolve(class_path, method, (FOREIGN,))
        handler(["touch", str(tmp_path / "spawned")])  # reached only on the old code

    assert "outside DELAYQ_HANDLERS" in str(caught.value)
    assert noted == []
    assert not (tmp_path / "spawned").exists()


def test_a_method_inherited_from_a_class_outside_the_allowlist_is_refused(noted):
    with pytest.raises(HandlerNotAllowed, match="outside DELAYQ_HANDLERS"):
        resolve(f"{FOREIGN}.Borrows", "describe", (FOREIGN,))

    assert noted == []


def test_a_class_replacing_the_foreign_constructor_with_its_own_runs_only_its_own(noted):
    handler = resolve(f"{FOREIGN}.OwnInit", "run", (FOREIGN,))

    assert handler(None) == "ran"
    assert noted == []


@pytest.mark.parametrize(
    ("entry", "names"),
    [
        ("os", "a standard library module"),
        ("subprocess", "a standard library module"),
        ("builtins", "a standard library module"),
        ("importlib.util", "a standard library module"),
        ("email.mime", "a standard library module"),
        ("redis", "a package delayq runs on"),
        ("peewee", "a package delayq runs on"),
        ("pymysql", "a package delayq runs on"),
        ("pip", "a package delayq runs on"),
        ("delayq", "delayq itself"),
        ("delayq.worker", "delayq itself"),
    ],
)
def test_allowlist_entries_naming_code_that_is_not_the_applications_are_refused(entry, names):
    with pytest.raises(ConfigError, match=f"names {names}"):
        check_allowlist(("tests.sample_handlers", entry))
    with pytest.raises(ConfigError, match=f"DELAYQ_HANDLERS entry {entry!r}"):
        resolve("tests.sample_handlers.jobs", "echo", ("tests.sample_handlers", entry))


def test_an_installed_package_delayq_does_not_run_on_is_accepted():
    # An application pip-installed into the environment lives in site-packages too.
    check_allowlist(("croniter",))


def test_an_entry_that_is_the_applications_own_code_is_accepted():
    check_allowlist(("tests.sample_handlers", "tests.sample_handlers.foreign"))
