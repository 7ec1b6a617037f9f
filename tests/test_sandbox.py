"""The code sandbox against adversarial programs, with bubblewrap and with the audit-hook fallback forced.

Every case must score 0 (never a pass), end within its limit and leave the machine and this process unharmed.
"""

import os
import secrets
import warnings
from pathlib import Path

import pytest

from rewards import sandbox
from rewards.sandbox import Limits, run_many, run_program

LIMITS = Limits(timeout_s=3.0, memory_mb=512)
SLACK_S = 20.0  # generous: the point is that nothing runs on unbounded, not how fast it stops
PROJECT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["bwrap", "fallback"])
def mode(request):
    if request.param == "bwrap" and not sandbox.bwrap_available():
        pytest.skip("bubblewrap is not available here (apt-get install bubblewrap)")
    return request.param == "bwrap"


@pytest.fixture
def unharmed(tmp_path):
    """An outside directory with a file in it; afterwards: same files, same content, same env and cwd here."""
    outside = tmp_path / "outside"
    outside.mkdir()
    keep = outside / "keep.txt"
    keep.write_text("precious")
    env, cwd = _env(), os.getcwd()
    project_files = set(os.listdir(PROJECT))
    yield outside
    assert keep.read_text() == "precious"
    assert sorted(os.listdir(outside)) == ["keep.txt"]
    assert _env() == env and os.getcwd() == cwd
    assert set(os.listdir(PROJECT)) - project_files == set()


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def run(parts, use_bwrap, limits=LIMITS):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the fallback warning has its own test
        res = run_program(parts, limits=limits, use_bwrap=use_bwrap)
    assert not res.passed
    assert res.seconds < limits.timeout_s + SLACK_S
    assert res.sandbox == ("bwrap" if use_bwrap else "audit-hook")
    return res


def test_good_program_passes(mode):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = run_program([("code", "def f(x):\n    return x + 1\n"), ("tests", "assert f(1) == 2\n")],
                          use_bwrap=mode)
    assert res.passed and res.status == "passed", res
    failing = run([("code", "def f(x):\n    return x\n"), ("tests", "assert f(1) == 2\n")], mode)
    assert failing.status == "failed"


def test_infinite_loop_is_killed(mode, unharmed):
    res = run([("code", "while True:\n    pass\n"), ("tests", "assert True\n")], mode)
    assert res.status == "timeout"
    res = run([("code", "import time\ntime.sleep(3600)\n")], mode)  # idle, not burning CPU: wall clock
    assert res.status == "timeout"


@pytest.mark.parametrize(
    "program",
    [
        "import os\nwhile True:\n    os.fork()\n",
        "import subprocess\nsubprocess.Popen(['sh', '-c', ':(){ :|:& };:'])\n",
        "import multiprocessing as mp\nfor _ in range(1000):\n    mp.Process(target=print).start()\n",
        "import os\nos.system('sh -c \"while true; do sleep 1 & done\"')\n",
        "import os\nos.posix_spawn('/bin/sh', ['sh', '-c', 'sleep 100'], {})\n",
    ],
    ids=["os.fork", "subprocess", "multiprocessing", "os.system", "posix_spawn"],
)
def test_fork_bomb(mode, unharmed, program):
    res = run([("code", program), ("tests", "assert True\n")], mode)
    assert res.status == "blocked", res


def test_allocating_50_gb(mode, unharmed):
    res = run([("code", "x = bytearray(50 * 1024 ** 3)\nx[-1] = 1\n"), ("tests", "assert len(x) > 0\n")], mode)
    assert res.status == "error" and "MemoryError" in res.error
    # Growing step by step touches every page it gets. A freshly booted VM (as CI is) faults fresh pages in at a
    # few hundred MB/s, so this run gets a wall clock that cannot end first: the memory limit must stop it.
    growing = Limits(timeout_s=30.0, memory_mb=256)
    res = run([("code", "xs = []\nwhile True:\n    xs.append(bytearray(10 ** 7))\n")], mode, growing)
    assert res.status in ("error", "crash") and res.status != "timeout", res


def test_writing_outside(mode, unharmed):
    targets = [unharmed / "created.txt", PROJECT / "sandbox_escape.txt", Path.home() / "sandbox_escape.txt"]
    for target in targets:
        program = f"with open({str(target)!r}, 'w') as f:\n    f.write('escaped')\n"
        res = run([("code", program), ("tests", "assert True\n")], mode)
        assert res.status == "blocked", res
        assert not target.exists()
    # the same write, with the error swallowed by the program, still scores 0
    program = f"try:\n    open({str(targets[0])!r}, 'w').write('x')\nexcept Exception:\n    pass\n"
    res = run([("code", program), ("tests", "assert True\n")], mode)
    assert res.status == "blocked" and not targets[0].exists()
    # writing inside its own directory is fine
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ok = run_program([("code", "open('mine.txt', 'w').write('x')\n"), ("tests", "assert open('mine.txt').read()")],
                         limits=LIMITS, use_bwrap=mode)
    assert ok.passed, ok


@pytest.mark.parametrize(
    "program",
    [
        "import os\nos.remove(KEEP)\n",
        "import shutil, os\nshutil.rmtree(os.path.dirname(KEEP))\n",
        "import os\nd = os.open(os.path.dirname(KEEP), os.O_RDONLY)\nos.unlink('keep.txt', dir_fd=d)\n",
        "import os\nos.chdir(os.path.dirname(KEEP))\nopen('keep.txt', 'w').close()\n",
        "import os\nos.rename(KEEP, KEEP + '.moved')\n",
        "import pathlib\npathlib.Path(KEEP).write_text('overwritten')\n",
    ],
    ids=["remove", "rmtree", "dir_fd", "chdir-truncate", "rename", "pathlib"],
)
def test_deleting_a_file_outside(mode, unharmed, program):
    keep = str(unharmed / "keep.txt")
    res = run([("code", f"KEEP = {keep!r}\n" + program), ("tests", "assert True\n")], mode)
    assert res.status in ("blocked", "error"), res  # blocked by the hook (or absent from bwrap's view)


def test_reading_a_parent_secret(mode, unharmed, monkeypatch):
    secret = "s3cret-" + secrets.token_hex(8)
    monkeypatch.setenv("SPECDEC_TEST_SECRET", secret)
    program = (
        "import os\nfound = ' '.join(os.environ.values())\n"
        "for p in [f'/proc/{os.getppid()}/environ', '/proc/1/environ']:\n"
        "    try:\n        found += open(p, 'rb').read().decode(errors='replace')\n"
        "    except Exception:\n        pass\n"
    )
    res = run([("code", program), ("tests", f"assert {secret!r} in found\n")], mode)
    assert res.status in ("failed", "blocked")
    assert secret not in res.stdout + res.stderr + res.error
    assert os.environ["SPECDEC_TEST_SECRET"] == secret


# Walk every frame; write any token found in a frame's locals to the result pipe and exit "cleanly".
STEAL = ("import os, sys\ndef steal():\n    f = sys._getframe(1)\n    while f is not None:\n"
         "        loc = f.f_locals\n        if 'token' in loc and 'result_fd' in loc:\n"
         "            os.write(loc['result_fd'], loc['token'] + b'\\n')\n            os._exit(0)\n"
         "        f = f.f_back\n")


@pytest.mark.parametrize(
    "program, status",
    [
        ("import sys\nsys.exit(0)\n", "exit"),
        ("raise SystemExit\n", "exit"),
        ("import os\nos._exit(0)\n", "no_sentinel"),
        # a fake pass record on every plausible fd, then a clean exit
        ("import os\nfor fd in range(1, 30):\n    try:\n        os.write(fd, b'0' * 32 + b'\\n')\n"
         "    except OSError:\n        pass\nos._exit(0)\n", "no_sentinel"),
        # walking frames to the runner and calling its finish event early
        ("import sys, os\nf = sys._getframe()\nwhile f.f_back is not None:\n    f = f.f_back\n"
         "sys.audit('sandbox.finish', f)\nos._exit(0)\n", "no_sentinel"),
        # reaching the runner's frame and emptying its list of parts, so the loop would end "normally" (passed
        # before the parts became a tuple whose every exec the hook counts)
        ("import sys\nsys._getframe(1).f_locals['codes'].clear()\n", "error"),
        ("import gc\nprint(len(gc.get_objects()))\n", "blocked"),
        ("import sys\nsys.settrace(lambda *a: None)\n", "blocked"),
        ("import ctypes\n", "blocked"),
        # a subinterpreter would run without the audit hook
        ("import _xxsubinterpreters as s\ns.run_string(s.create(), 'import os; os._exit(0)')\n", "blocked"),
        # the program's own code called from inside the audit hook (a str subclass as a module name or a path)
        # would find the hook's frame, and the pass token in its closure
        (STEAL + "class S(str):\n    def __str__(self):\n        steal()\n        return 'x'\n"
         "    def split(self, *a):\n        steal()\n        return ['x']\n"
         "try:\n    __import__(S('no_such_module'))\nexcept Exception:\n    pass\n"
         "try:\n    open(S('f.txt'), 'w')\nexcept Exception:\n    pass\n", "blocked"),
        # an extension loaded under a package name (fork_exec raises no audit event)
        ("import importlib.util, _posixsubprocess as p\n", "blocked"),
        ("import importlib.util, glob, sysconfig\nfrom importlib.machinery import ExtensionFileLoader\n"
         "so = glob.glob(sysconfig.get_paths()['platstdlib'] + '/lib-dynload/_posixsubprocess*.so')[0]\n"
         "spec = importlib.util.spec_from_file_location('x._posixsubprocess', so)\n"
         "importlib.util.module_from_spec(spec)\n", "blocked"),
        ("import os\nos.chdir('/')\n", "blocked"),  # relative paths are checked against the sandbox dir
    ],
    ids=["sys.exit", "SystemExit", "os._exit", "fake-token", "frame-walk", "skip-parts", "gc", "settrace", "ctypes",
         "subinterp", "hook-reentry", "posixsubprocess", "renamed-extension", "chdir"],
)
def test_exit_before_the_asserts_is_not_a_pass(mode, unharmed, program, status):
    res = run([("code", program), ("tests", "assert False, 'the tests must never be reached'\n")], mode)
    assert res.status == status, res


def test_printing_gigabytes(mode, unharmed):
    for stream in ("stdout", "stderr"):
        program = f"import sys\nwhile True:\n    sys.{stream}.write('x' * 10 ** 6)\n"
        res = run([("code", program), ("tests", "assert True\n")], mode)
        assert res.status == "output_limit"
        assert len(res.stdout) <= 2000 and len(res.stderr) <= 2000
    res = run([("code", "print('y' * 10 ** 9)\n")], mode)  # one huge write (needs ~1 GB: memory error or cap)
    assert res.status in ("output_limit", "error")


def test_network_is_refused(mode, unharmed):
    program = "import socket\ns = socket.create_connection(('127.0.0.1', 22), timeout=1)\n"
    res = run([("code", program), ("tests", "assert True\n")], mode)
    assert res.status == "blocked"


def test_pool_keeps_order_and_bounds(mode):
    progs = [[("code", f"x = {i}\n"), ("tests", f"assert x == {i} and {i} % 2 == 0\n")] for i in range(6)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = run_many(progs, max_workers=2, limits=LIMITS, use_bwrap=mode)
    assert [r.passed for r in res] == [True, False, True, False, True, False]
    assert run_many([], max_workers=2) == []


def test_fallback_warns_once(monkeypatch):
    monkeypatch.setattr(sandbox, "_warned_fallback", False)
    with pytest.warns(RuntimeWarning, match="WITHOUT bubblewrap") as record:
        run_program("assert True\n", use_bwrap=False)
        run_program("assert True\n", use_bwrap=False)
    assert len([w for w in record if "bubblewrap" in str(w.message)]) == 1


def test_missing_bwrap_when_required(monkeypatch):
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        run_program("assert True\n", use_bwrap=True)
    monkeypatch.setattr(sandbox, "_warned_fallback", False)
    monkeypatch.setenv("SPECDEC_SANDBOX_BWRAP", "auto")
    with pytest.warns(RuntimeWarning, match="not installed or cannot run"):
        assert run_program("assert True\n").passed  # auto: falls back, loudly


def test_bwrap_alone_contains_the_program(monkeypatch, unharmed):
    """Defense in depth: with the audit hook removed from the child, bubblewrap by itself still protects."""
    if not sandbox.bwrap_available():
        pytest.skip("bubblewrap is not available here")
    no_hook = sandbox._CHILD_SOURCE.replace("    sys.addaudithook(hook)\n", "    pass\n")
    assert no_hook != sandbox._CHILD_SOURCE
    monkeypatch.setattr(sandbox, "_CHILD_SOURCE", no_hook)
    keep = unharmed / "keep.txt"
    programs = [
        f"open({str(PROJECT / 'sandbox_escape.txt')!r}, 'w').write('x')",
        f"open({str(Path.home() / 'sandbox_escape.txt')!r}, 'w').write('x')",
        "open('/etc/sandbox_escape.txt', 'w').write('x')",
        f"import os\nos.remove({str(keep)!r})",
        "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=1)",
        "import os\nos.kill(os.getppid(), 9)",  # the parent is outside its pid namespace
        "import subprocess\nsubprocess.run(['sh', '-c', 'touch /tmp/x " + str(PROJECT / "sandbox_escape2.txt") + "'])",
    ]
    for program in programs:
        res = run_program(program, limits=LIMITS, use_bwrap=True)
        assert not res.passed
    assert not (PROJECT / "sandbox_escape.txt").exists() and not (PROJECT / "sandbox_escape2.txt").exists()
    assert not (Path.home() / "sandbox_escape.txt").exists() and not Path("/etc/sandbox_escape.txt").exists()
