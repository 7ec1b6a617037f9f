"""Run generated Python programs in a sandbox and report pass/fail. The trainer never executes generated code.

Layers (each one alone is not enough; running as root, rlimits and a temp cwd stop nothing on the filesystem):
1. bubblewrap, when available: read-only root, private tmpfs /tmp (size-capped) as the working directory, the home
   and project directories hidden, every namespace unshared (no network, own pid namespace), all capabilities
   dropped, killed with its parent.
2. A separate process in its own session, killed as a whole process group on the wall-clock timeout; a stripped
   environment; resource limits (CPU seconds, address space, processes, file size, open files, no core dumps).
3. Always, as defense in depth and as the only filesystem guard when bwrap is missing: a Python audit hook installed
   in the child before the program runs (rewards/sandbox_child.py) that blocks writes and deletions outside the
   working directory, process creation, signals, sockets, ctypes and frame/gc introspection.
4. stdout/stderr are read through pipes with a byte cap; past the cap the program is killed.
A pass is counted only when the child writes a random per-run token to a private pipe after every part of the
program ran without an exception (so sys.exit(0) or os._exit(0) before the asserts is not a pass).
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

_CHILD_FILE = Path(__file__).with_name("sandbox_child.py")
_CHILD_SOURCE = _CHILD_FILE.read_text()
_FINISH_LINE = next(i for i, line in enumerate(_CHILD_SOURCE.splitlines(), 1) if "# FINISH" in line)
_PROJECT_ROOT = Path(__file__).resolve().parents[1]
CHECKED_PARTS = ("tests",)  # parts whose comparisons only trust built-in data (see run_program)
_warned_fallback = False
_warn_lock = threading.Lock()


@dataclass
class ExecResult:
    passed: bool
    # passed | failed | error | syntax_error | exit | blocked | timeout | output_limit | crash | no_sentinel
    status: str
    error: str = ""
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    seconds: float = 0.0
    sandbox: str = ""  # "bwrap" or "audit-hook" (fallback)
    violations: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0  # wall clock; the CPU limit is derived from it
    memory_mb: int = 1024  # address space
    max_procs: int = 32  # RLIMIT_NPROC (not enforced by the kernel for root; the audit hook blocks forks anyway)
    max_output_bytes: int = 1 << 16  # stdout + stderr together; the program is killed past it
    max_file_bytes: int = 1 << 24  # largest file the program may write
    tmpfs_bytes: int = 1 << 26  # size of the private /tmp under bwrap (the working directory lives there)
    max_open_files: int = 64


def _python() -> str:
    # The base interpreter with -I: the stdlib only, never the project's venv or its packages.
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


@lru_cache(maxsize=1)
def bwrap_available() -> bool:
    """True when bwrap exists and can actually create the namespaces here (probed once)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    try:
        probe = subprocess.run(
            _bwrap_prefix(exe, Limits()) + [_python(), "-I", "-c", "pass"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def _bwrap_prefix(exe: str, limits: Limits) -> list[str]:
    cmd = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    cmd += ["--size", str(limits.tmpfs_bytes), "--tmpfs", "/tmp", "--dir", "/tmp/sandbox", "--chdir", "/tmp/sandbox"]
    # Hide directories that may hold secrets or the project itself, re-exposing the interpreter if it lives there.
    prefix = os.path.realpath(sys.base_prefix)
    for hidden in sorted({os.path.realpath(Path.home()), str(_PROJECT_ROOT)}):
        if hidden in ("/", "/usr", "/tmp") or not os.path.isdir(hidden):
            continue
        cmd += ["--tmpfs", hidden]
        if prefix == hidden or prefix.startswith(hidden + "/"):
            cmd += ["--ro-bind", prefix, prefix]
        cmd += ["--remount-ro", hidden]  # an empty, read-only stand-in (a writable tmpfs could fill memory)
    cmd += ["--unshare-all", "--die-with-parent", "--new-session"]
    if os.geteuid() == 0:
        cmd += ["--cap-drop", "ALL"]
    return cmd


def _resolve_bwrap(use_bwrap: bool | None) -> bool:
    global _warned_fallback
    if use_bwrap is None:
        env = os.environ.get("SPECDEC_SANDBOX_BWRAP", "").strip().lower()
        use_bwrap = {"0": False, "false": False, "no": False, "1": True, "true": True, "yes": True}.get(env)
    if use_bwrap is True and not bwrap_available():
        raise RuntimeError(
            "bwrap was required (use_bwrap=True or SPECDEC_SANDBOX_BWRAP=1) but cannot run here: "
            "install it (apt-get install bubblewrap) and make sure user namespaces are allowed"
        )
    use = bwrap_available() if use_bwrap is None else use_bwrap
    if not use:
        with _warn_lock:
            if not _warned_fallback:
                _warned_fallback = True
                why = "disabled by configuration" if use_bwrap is False else "bwrap is not installed or cannot run"
                warnings.warn(
                    f"sandbox: running generated code WITHOUT bubblewrap ({why}); only the audit hook, rlimits "
                    "and a timeout protect this machine. Install bubblewrap (apt-get install bubblewrap).",
                    RuntimeWarning,
                    stacklevel=3,
                )
    return use


def run_program(
    parts: Sequence[tuple[str, str]] | str,
    *,
    limits: Limits | None = None,
    use_bwrap: bool | None = None,
    checked: Sequence[str] = CHECKED_PARTS,
) -> ExecResult:
    """Run the program given as [(name, source), ...] (executed in order in one namespace) or as one source string.

    use_bwrap: None = use it when available (SPECDEC_SANDBOX_BWRAP=0/1 overrides), True = required, False = off.
    checked: names of the parts that are tests: their comparisons and truth tests accept only built-in data (an
    object whose __eq__ always says True fails them), and they see pristine builtins (rewards/sandbox_child.py).
    """
    limits = limits or Limits()
    if isinstance(parts, str):
        parts = [("program", parts)]
    bwrap = _resolve_bwrap(use_bwrap)
    token = secrets.token_hex(16)
    rlimits = {
        "RLIMIT_CPU": int(limits.timeout_s) + 1,
        "RLIMIT_AS": limits.memory_mb << 20,
        "RLIMIT_NPROC": limits.max_procs,
        "RLIMIT_FSIZE": limits.max_file_bytes,
        "RLIMIT_NOFILE": limits.max_open_files,
        "RLIMIT_CORE": 0,
    }
    workdir = None if bwrap else tempfile.mkdtemp(prefix="specdec-sandbox-")
    home = "/tmp/sandbox" if bwrap else workdir
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": home, "TMPDIR": home, "PYTHONIOENCODING": "utf-8"}
    res_r, res_w = os.pipe()
    cmd = [_python(), "-I", "-B", "-c", _CHILD_SOURCE, str(res_w), str(_FINISH_LINE), json.dumps(rlimits)]
    if bwrap:
        cmd = _bwrap_prefix(shutil.which("bwrap"), limits) + cmd
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(res_w,),
            cwd=workdir or "/",
            env=env,
            start_new_session=True,  # own process group, killed as a whole
        )
    finally:
        os.close(res_w)
    try:
        job = [[name, source, name in checked] for name, source in parts]
        status, out, err, res = _communicate(proc, token, job, res_r, limits, start)
    finally:
        _kill(proc)
        os.close(res_r)
        if workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    return _verdict(status, proc.returncode, out, err, res, token, time.monotonic() - start, bwrap)


def _communicate(proc, token, parts, res_r, limits, start):
    payload = token.encode() + b"\n" + json.dumps([list(p) for p in parts]).encode()
    try:  # the child reads all of stdin before it runs anything, so this cannot deadlock
        proc.stdin.write(payload)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass
    bufs = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray(), res_r: bytearray()}
    sel = selectors.DefaultSelector()
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    status = None
    deadline = start + limits.timeout_s
    while sel.get_map() and status is None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            status = "timeout"
            break
        for key, _ in sel.select(timeout=remaining):
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                sel.unregister(key.fd)
                continue
            bufs[key.fd] += chunk
            output = len(bufs[proc.stdout.fileno()]) + len(bufs[proc.stderr.fileno()])
            if output > limits.max_output_bytes or len(bufs[res_r]) > 1 << 16:
                status = "output_limit"
                break
    sel.close()
    if status is None and not _wait_exit(proc.pid, deadline):
        status = "timeout"
    out, err = bufs[proc.stdout.fileno()], bufs[proc.stderr.fileno()]
    return status, bytes(out), bytes(err), bytes(bufs[res_r])


def _wait_exit(pid: int, deadline: float) -> bool:
    """Wait until the child exits, WITHOUT reaping it: its zombie keeps the process-group id from being reused
    until _kill has killed whatever else is left in the group. False on the deadline."""
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


def _kill(proc: subprocess.Popen) -> None:
    """Kill the whole process group (also when the leader already exited), then reap the leader."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None and not stream.closed:
            stream.close()


def _verdict(status, returncode, out, err, res, token, seconds, bwrap) -> ExecResult:
    records, passed = [], False
    for line in res.decode(errors="replace").splitlines():
        if line == token:
            passed = True
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    violations = [str(r["violation"]) + ": " + str(r.get("why", "")) for r in records if "violation" in r]
    final = next((r for r in reversed(records) if "status" in r), {})
    error = str(final.get("error", ""))
    if status is not None:  # timeout / output_limit decided by the parent: never a pass
        passed = False
        error = f"killed: {status}"
    elif passed and returncode == 0:
        status = "passed"
    elif violations:
        status, passed = "blocked", False
    elif final.get("status") in ("failed", "error", "syntax_error", "exit"):
        status, passed = final["status"], False
    elif returncode == 0:
        status, passed, error = "no_sentinel", False, "exited with 0 before all tests ran"
    else:
        status, passed = "crash", False
        error = f"exit code {returncode}" + (f" (signal {-returncode})" if returncode and returncode < 0 else "")
    if violations and status not in ("timeout", "output_limit"):
        error = (error + "; " if error else "") + "blocked: " + "; ".join(violations[:3])
    cap = 2000
    return ExecResult(
        passed=passed,
        status=status,
        error=error,
        returncode=returncode,
        stdout=out[:cap].decode(errors="replace"),
        stderr=err[-cap:].decode(errors="replace"),
        seconds=seconds,
        sandbox="bwrap" if bwrap else "audit-hook",
        violations=violations,
    )


def run_many(
    programs: Sequence[Sequence[tuple[str, str]] | str],
    *,
    max_workers: int = 2,
    limits: Limits | None = None,
    use_bwrap: bool | None = None,
    checked: Sequence[str] = CHECKED_PARTS,
) -> list[ExecResult]:
    """run_program over a batch with at most max_workers sandboxes alive at once; results in input order."""
    if not programs:
        return []
    _resolve_bwrap(use_bwrap)  # probe and warn once, before the threads start
    with ThreadPoolExecutor(max_workers=max(1, int(max_workers))) as pool:
        return list(pool.map(lambda p: run_program(p, limits=limits, use_bwrap=use_bwrap, checked=checked), programs))
