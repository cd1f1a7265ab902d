"""The test suite itself: it is collected alike by ``pytest`` and ``python -m pytest`` from the repository root, and
its subprocesses (distributed launches, recipe runs) cannot hang it or collide on a rendezvous port."""

import os
import re
import socket
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO_ROOT, BoundedProcess, free_ports, run_bounded


def pytest_command() -> list:
    """Plain ``pytest``: the console script next to this interpreter, else its equivalent (``python -m pytest``
    differs from it only by the current folder first on ``sys.path``, which the script does not have)."""
    script = Path(sys.executable).with_name("pytest")
    if script.is_file():
        return [script]
    return [sys.executable, "-c", "import sys; assert sys.path[0] == ''; del sys.path[0]; import pytest; "
            "sys.exit(pytest.console_main())"]


def collected_the_whole_suite(config) -> bool:
    """This session collected the whole suite: no path, ``-k`` or ``-m``."""
    option = config.option
    return config.args_source == pytest.Config.ArgsSource.TESTPATHS and not option.keyword and not option.markexpr


def whole_suite_count(config):
    """``(how this session was started, the number it collected)`` when that number is what a fresh ``--collect-only``
    of the same kind would print: the whole suite from the root, with no ``PYTHONPATH``; else ``None``."""
    from conftest import COLLECTED, started_as

    way = started_as(config)
    if (way is None or not collected_the_whole_suite(config) or Path(config.invocation_params.dir) != REPO_ROOT
            or "PYTHONPATH" in os.environ):
        return None
    return way, config.stash[COLLECTED]


def test_pytest_and_python_m_pytest_collect_the_same_suite_from_the_root(request):
    """Both ways collect the whole suite from the root, with no import error. Where this session is one of them (on
    the whole suite, `whole_suite_count`), its own count stands for that way and only the other one is started."""
    arguments = ["--collect-only", "-q", "-p", "no:cacheprovider"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # only the invocation decides sys.path
    own = whole_suite_count(request.config)
    commands = {"script": pytest_command(), "module": [sys.executable, "-m", "pytest"]}
    runs = {way: BoundedProcess([*command, *arguments], 300, cwd=REPO_ROOT, env=env)
            for way, command in commands.items() if own is None or way != own[0]}
    counts = dict([own] if own else [])
    for way, run in runs.items():
        result = run.wait()  # a module that fails to import is a collection error: exit status 2
        collected = re.search(r"^(\d+) tests? collected", result.stdout, flags=re.M)
        assert collected, result.stdout[-3000:]
        counts[way] = int(collected.group(1))
    assert counts["script"] == counts["module"] > 100, counts


def test_free_ports_are_distinct_and_free():
    ports = free_ports(3)
    assert len(set(ports)) == 3 and 29500 not in ports
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_run_past_its_deadline_is_killed_with_its_children_and_shows_its_stderr(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time; "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
            f"open({str(pid_file)!r}, 'w').write(str(child.pid)); "
            "print('rank 1 waits at a barrier', file=sys.stderr, flush=True); time.sleep(300)")
    start = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="(?s)ran past its 5 s.*rank 1 waits at a barrier"):
        run_bounded([sys.executable, "-c", code], timeout=5)
    assert time.monotonic() - start < 60
    grandchild, deadline = int(pid_file.read_text()), time.monotonic() + 10
    while running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not running(grandchild)  # killed with the group


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed process stays one until its new parent reaps it)."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_the_lower_bounds_pass_keeps_each_test_once_per_kind_of_training_loop():
    """The rule of the lower-bounds pass (``conftest.lower_bounds_case``): a test over the methods keeps its first
    Trainer-based method and its first own-loop method for each setting of its other parameters; every other test
    runs whole."""
    from types import SimpleNamespace

    from conftest import lower_bounds_case
    from csekit.methods import METHODS

    def case(method, **params):
        return SimpleNamespace(nodeid=f"t.py::test[{method}]", module=SimpleNamespace(__name__="t"),
                               originalname="test", callspec=SimpleNamespace(params={"method": method, **params}))

    names = list(METHODS)
    keys = {name: lower_bounds_case(case(name)) for name in names}
    loops = {key[-1] for key in keys.values()}
    assert loops == {True, False} and len(set(keys.values())) == 2  # one Trainer loop, one own loop
    assert lower_bounds_case(case(names[0], chunks="cached")) != lower_bounds_case(case(names[0], chunks="tokens"))
    plain = SimpleNamespace(nodeid="t.py::test_plain", callspec=SimpleNamespace(params={"name": "not-a-method"}))
    assert lower_bounds_case(plain) == ("t.py::test_plain",)


def test_the_lower_bounds_pass_runs_the_boundary_and_real_data_tests(monkeypatch):
    """The tiers (``conftest.CORE_MODULES``): a test of any module not named there is ``boundary`` unless it carries
    ``core``; the lower-bounds pass keeps the ``boundary`` tests, a core module's test only with the mark it carries
    itself or with real data."""
    from types import SimpleNamespace

    import conftest

    class Case:
        def __init__(self, module, marks=(), fixtures=()):
            self.module, self.nodeid = SimpleNamespace(__name__=module), f"{module}.py::test_{len(marks)}{fixtures}"
            self.marks, self.fixturenames = set(marks), fixtures

        def add_marker(self, name):
            self.marks.add(name)

        def get_closest_marker(self, name):
            return name if name in self.marks else None

    core = next(iter(conftest.CORE_MODULES))
    cases = {"boundary module": Case("test_onnx"), "core": Case(core), "marked": Case(core, ["boundary"]),
             "real data": Case(core, fixtures=("real_data_dir",)), "marked core": Case("test_onnx", ["core"])}
    items, deselected = list(cases.values()), []
    config = SimpleNamespace(stash={}, hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
    monkeypatch.setattr(conftest, "LOWER_BOUNDS", True)
    monkeypatch.setenv("CSEKIT_EVERY_CASE", "0")  # the hook sets it for the pytests a test starts; restored after
    conftest.pytest_collection_modifyitems(config, items)
    assert deselected == [cases["core"], cases["marked core"]] and "boundary" in cases["boundary module"].marks
    assert set(conftest.CORE_MODULES) <= {path.stem for path in Path(__file__).parent.glob("test_*.py")}


def test_readme_states_the_suites_size(request):
    """README's "The suite has N tests" is the number collected, when the whole suite is (no path, -k or -m)."""
    from conftest import COLLECTED

    if not collected_the_whole_suite(request.config):
        pytest.skip("only a run of the whole suite knows its size")
    stated = re.search(r"The suite has ([\d,]+) tests", (REPO_ROOT / "README.md").read_text()).group(1)
    assert int(stated.replace(",", "")) == request.config.stash[COLLECTED]
