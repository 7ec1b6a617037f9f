"""The child side of the sandbox. Never imported by the trainer: rewards/sandbox.py passes this file's text to
`python -I -B -c` inside the sandbox, with argv = [result_fd, finish_line, limits_json].

stdin carries one line with the pass token, then a JSON list of [name, source] parts, executed in order in one
namespace (the generated code and the tests are separate parts, so an unterminated string in the code cannot
swallow the tests). A pass is reported only by writing the token to result_fd, which the audit hook does when the
runner reaches the FINISH line below after every part ran without an exception, and only if every part's code
object was really executed (the hook counts their `exec` audit events: a program that reaches the runner's frame,
e.g. with sys._getframe(1), and empties its list of parts or rebinds its exec, is not a pass). The token lives
only in the hook's closure: the program cannot reach it without frame or gc introspection, which the hook blocks,
and it cannot fake the runner frame's current line (that needs a trace function, also blocked). Nor can the
program's code run inside the hook (where the hook's frame would be within reach): the hook accepts only exact
built-in types for the names and paths it inspects, never a subclass whose methods the program wrote.
"""

import os
import sys


def _limits(lim: dict) -> None:
    import resource

    for name, value in lim.items():
        # Hard limit = soft limit, so the program cannot raise them back (setrlimit is blocked too).
        resource.setrlimit(getattr(resource, name), (value, value))


def _guard(runner_frame, finish_line: int, result_fd: int) -> tuple:
    """Read the token and the job from stdin, compile the parts, install the audit hook, return the compiled
    parts as a tuple of (name, code). Keeps the token. Raises SyntaxError/ValueError for a part that does not
    compile (no hook is installed then: nothing runs)."""
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    token, _, job = b"".join(chunks).partition(b"\n")
    import json

    codes = tuple(
        (name, compile(_checked_tree(src) if rest and rest[0] else src, f"<{name}>", "exec"), bool(rest and rest[0]))
        for name, src, *rest in json.loads(job)
    )
    expected = {id(code): code for _, code, _ in codes}  # the dict keeps them alive, so ids stay theirs
    executed: set[int] = set()
    root = os.path.realpath(os.getcwd())
    own_proc = f"/proc/{os.getpid()}"
    write, realpath, fspath, isdir, dumps = os.write, os.path.realpath, os.fsdecode, os.path.isdir, json.dumps
    import pathlib

    # The hook must never run the program's code: a str subclass's __str__/__eq__ or a PathLike's __fspath__ would
    # run with the hook's frame (and the token in its closure) on the stack. Paths and names of any other type are
    # denied; pathlib's own classes (exact types) are trusted.
    path_types = (str, bytes, pathlib.PosixPath, pathlib.PurePosixPath)
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
    violations: list[str] = []
    # _posixsubprocess.fork_exec raises no audit event: without it, subprocess/multiprocessing cannot start.
    # Subinterpreters run without this interpreter's audit hooks; _testcapi and friends poke at raw memory.
    banned_imports = (
        "ctypes", "_ctypes", "cffi", "_posixsubprocess", "_xxsubinterpreters", "_xxinterpchannels",
        "_interpreters", "_interpqueues", "_interpchannels", "_testcapi", "_testinternalcapi", "_testmultiphase",
    )  # fmt: skip
    finished: list[bool] = []

    deny_always = {
        "os.chdir",  # the hook resolves relative paths against the sandbox dir: it must stay the cwd
        "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "os.startfile",
        "subprocess.Popen", "pty.spawn", "os.kill", "os.killpg", "signal.pthread_kill",
        "resource.setrlimit", "resource.prlimit", "sys.settrace", "sys.setprofile", "sys._current_frames",
        "sys.addaudithook", "gc.get_objects", "gc.get_referrers", "gc.get_referents", "ctypes.dlopen",
        "ctypes.dlsym", "ctypes.cdata", "ctypes.addressof", "ctypes.string_at", "ctypes.wstring_at",
        "sys.monitoring.register_callback",
    }  # fmt: skip
    path_events = {  # event -> positions of path arguments and of dir_fd arguments
        "os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.rename": ((0, 1), (2, 3)),
        "os.link": ((0, 1), (2, 3)), "os.symlink": ((0, 1), (2,)), "os.truncate": ((0,), ()),
        "os.mkdir": ((0,), (2,)), "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)),
        "os.utime": ((0,), (3,)), "os.mkfifo": ((0,), (2,)), "os.mknod": ((0,), (3,)),
        "shutil.rmtree": ((0,), (1,)), "os.chflags": ((0,), ()), "os.lchflags": ((0,), ()),
    }  # fmt: skip

    def checked(event: str, path) -> str:
        """The real path of an audited path argument, converted without running the program's code."""
        if type(path) not in path_types:
            deny(event, "a path that is not a str, bytes or pathlib path")
        return realpath(fspath(path))

    def inside(p: str) -> bool:
        return p == root or p.startswith(root + "/")

    def deny(event: str, why: str):
        violations.append(event)
        if len(violations) <= 5:
            write(result_fd, (dumps({"violation": event, "why": why}) + "\n").encode())
        raise PermissionError(f"sandbox: {event} blocked ({why})")

    def hook(event: str, args: tuple) -> None:
        if event == "exec":
            if args and expected.get(id(args[0])) is args[0]:
                executed.add(id(args[0]))
            return
        if event == "sandbox.finish":
            # Only the runner frame, standing on the FINISH line, with no violation so far, every part executed,
            # and only once.
            if args and args[0] is runner_frame and runner_frame.f_lineno == finish_line:
                if not violations and not finished and len(executed) == len(expected):
                    finished.append(True)
                    write(result_fd, token + b"\n")
            return
        if event in deny_always or event.startswith("socket.") or event.startswith("ctypes."):
            deny(event, "not allowed in the sandbox")
        elif event == "open":
            path, mode, flags = args
            if type(path) is int:
                return
            p = checked(event, path)
            if mode is not None and type(mode) is not str:
                deny(event, "a mode that is not a str")
            writing = (mode is not None and any(c in mode for c in "wax+")) or bool((flags or 0) & write_flags)
            if writing and not inside(p) and p != "/dev/null":
                deny(event, f"write outside the sandbox dir: {p}")
            if p.startswith("/proc/") and not (p + "/").startswith(own_proc + "/"):
                deny(event, f"other processes' /proc: {p}")
            if p.endswith("/mem") and p.startswith("/proc/"):
                deny(event, "process memory")
            if not inside(p) and isdir(p):  # a directory fd would allow dir_fd-relative writes anywhere
                deny(event, f"opening a directory outside the sandbox dir: {p}")
        elif event in path_events:
            paths, dir_fds = path_events[event]
            for i in dir_fds:
                if i < len(args) and args[i] not in (None, -1, -100):  # -1: no dir_fd given; -100: AT_FDCWD
                    deny(event, "dir_fd-relative file operation")
            for i in paths:
                if i < len(args) and type(args[i]) is not int:
                    p = checked(event, args[i])
                    if not inside(p):
                        deny(event, f"outside the sandbox dir: {p}")
        elif event == "import" and args:
            if type(args[0]) is not str:
                deny(event, "a module name that is not a str")
            # every component: an extension's init function is named after the last one, whatever the package
            if any(part in banned_imports for part in args[0].split(".")):
                deny(event, f"import {args[0]}")
        elif event == "object.__getattr__" and len(args) > 1:
            if type(args[1]) is not str:
                deny(event, "an attribute name that is not a str")
            if args[1] in ("tb_frame", "gi_frame", "cr_frame", "ag_frame"):
                deny(event, f"frame introspection ({args[1]})")

    # pidfd_open + pidfd_send_signal raise no audit event (a kill of any process of this user without bwrap)
    import posix
    import signal

    for mod, name in ((os, "pidfd_open"), (posix, "pidfd_open"), (signal, "pidfd_send_signal")):
        if hasattr(mod, name):
            delattr(mod, name)
    sys.addaudithook(hook)
    return codes


def _main() -> None:
    import builtins
    import json

    result_fd, finish_line, limits = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
    _limits(limits)
    frame = sys._getframe()
    # Keep our own references: the program may replace module attributes (sys.audit, os.write, ...).
    audit, write, dumps, exit_, run, flush = sys.audit, os.write, json.dumps, os._exit, exec, _flush
    status, info = "error", {}
    try:
        codes = _guard(frame, finish_line, result_fd)
    except (SyntaxError, ValueError) as e:
        write(result_fd, (dumps({"status": "syntax_error", "error": f"{type(e).__name__}: {e}"}) + "\n").encode())
        flush()
        exit_(3)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    # Taken before the program runs: the checked parts (the tests) see these builtins and helpers, whatever the
    # program did to the builtins module or to its own globals.
    pristine_builtins = dict(builtins.__dict__)
    helpers = _checks()
    tests_ns = None
    part = None
    try:
        for part, code, checked in codes:  # noqa: B007 - `part` names the failing part below
            if not checked:
                run(code, namespace)
                continue
            if tests_ns is None:
                # The program's names (its functions) in a globals dict of the tests' own: a `global` statement
                # in a function the tests call rebinds the program's namespace, not the tests' helpers.
                tests_ns = dict(namespace)
                tests_ns["__builtins__"] = pristine_builtins
            tests_ns.update(helpers)
            run(code, tests_ns)
    except SystemExit as e:
        status, info = "exit", {"error": f"SystemExit({e.code!r}) in <{part}> before all tests ran"}
    except AssertionError as e:
        status, info = "failed", {"error": f"AssertionError in <{part}> line {_lineno(e)}: {str(e)[:200]}"}
    except BaseException as e:  # noqa: B036 - the program may raise anything; all of it is a failure
        status, info = "error", {"error": f"{type(e).__name__} in <{part}> line {_lineno(e)}: {str(e)[:200]}"}
    else:
        flush()
        audit("sandbox.finish", frame)  # FINISH (rewards/sandbox.py finds this line by this marker)
        exit_(0)
    flush()
    write(result_fd, (dumps({"status": status, **info}) + "\n").encode())
    exit_(1)


CMP, CHAIN, TRUTH = "__sandbox_compare__", "__sandbox_chain__", "__sandbox_truth__"


def _checked_tree(src: str):
    """The tests' syntax tree with every comparison and every truth test (assert, if, while, conditional
    expression, and/or/not) routed through the helpers of `_checks`: a value the program returned is compared or
    tested only when it is built-in data, so an object whose __eq__ (or __bool__, __lt__, ...) always says yes
    cannot pass an assert."""
    import ast

    ops = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Is: "is",
           ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}

    def call(name: str, args: list) -> ast.Call:
        return ast.Call(func=ast.Name(id=name, ctx=ast.Load()), args=args, keywords=[])

    class Checked(ast.NodeTransformer):
        def visit_Compare(self, node):
            self.generic_visit(node)
            names = [ast.Constant(ops[type(op)]) for op in node.ops]
            if len(names) == 1:
                new = call(CMP, [names[0], node.left, node.comparators[0]])
            else:  # a < b < c: later operands stay lazy (evaluated only if the chain gets there), as in Python
                no_args = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
                new = call(CHAIN, [node.left] + [ast.Tuple([n, ast.Lambda(no_args, c)], ast.Load())
                                                 for n, c in zip(names, node.comparators)])
            return ast.copy_location(new, node)

        def truth(self, node):
            if isinstance(node, ast.BoolOp):
                return ast.copy_location(ast.BoolOp(node.op, [self.truth(v) for v in node.values]), node)
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
                return ast.copy_location(ast.UnaryOp(ast.Not(), self.truth(node.operand)), node)
            return ast.copy_location(call(TRUTH, [node]), node)

        def visit_Assert(self, node):
            self.generic_visit(node)
            node.test = self.truth(node.test)
            return node

        visit_If = visit_While = visit_IfExp = visit_Assert

    return ast.fix_missing_locations(Checked().visit(ast.parse(src)))


def _checks() -> dict:
    """The helpers `_checked_tree` calls. Built before the program runs, from references taken now.

    A value is trusted when every class of its type's MRO up to the first built-in type (the built-in scalar and
    container types, collections' dicts and deque, or object) leaves the methods a comparison or a truth test
    calls to that built-in type: then the answer comes from built-in code (object's is identity: such an
    instance equals only itself). Containers are checked element by element. A value that is not trusted raises
    AssertionError: the test fails rather than take the program's own answer to "are these equal?"."""
    import collections
    import operator

    type_, id_, bool_, repr_, dict_items = type, id, bool, repr, dict.items
    scalars = {bool, int, float, complex, str, bytes, type(None), type(Ellipsis), range}
    iterate = {list: list.__iter__, tuple: tuple.__iter__, set: set.__iter__, frozenset: frozenset.__iter__,
               collections.deque: collections.deque.__iter__}
    mappings = {dict, collections.OrderedDict, collections.defaultdict, collections.Counter}
    builtin = scalars | set(iterate) | mappings | {object}
    dunders = ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__bool__", "__len__", "__contains__",
               "__iter__")
    compare = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
               ">=": operator.ge, "in": lambda a, b: operator.contains(b, a),
               "not in": lambda a, b: not operator.contains(b, a)}

    def builtin_base(t):
        """The built-in type whose methods an instance of t uses for comparisons and truth, or None."""
        for c in type_.__dict__["__mro__"].__get__(t):  # type's own descriptor: not a metaclass's __getattr__
            if c in builtin:
                return c
            if any(d in type_.__dict__["__dict__"].__get__(c) for d in dunders):
                return None
        return None

    def trusted(x, seen: set, depth: int) -> bool:
        base = builtin_base(type_(x))
        if base is None or depth > 200:
            return False
        if base is object or base in scalars or id_(x) in seen:
            return True
        seen.add(id_(x))
        if base in mappings:
            return all(trusted(k, seen, depth + 1) and trusted(v, seen, depth + 1) for k, v in dict_items(x))
        return all(trusted(v, seen, depth + 1) for v in iterate[base](x))

    def check(x):
        if not trusted(x, set(), 0):
            raise AssertionError(f"the test compared or tested a {repr_(type_(x))} that defines its own comparison "
                                 f"or truth value: the program's own answer is not trusted")
        return x

    def compare_(op, a, b):
        if op == "is":
            return a is b
        if op == "is not":
            return a is not b
        return bool_(compare[op](check(a), check(b)))

    def chain(left, *rest):
        for op, right in rest:
            right = right()
            if not compare_(op, left, right):
                return False
            left = right
        return True

    def truth(x):
        return bool_(check(x))

    return {CMP: compare_, CHAIN: chain, TRUTH: truth}


def _lineno(e: BaseException):
    """The line in the failing part: the traceback's second entry (the first is the runner's exec call)."""
    lines, tb = [], e.__traceback__
    while tb is not None:  # tb_lineno / tb_next are not audited; tb_frame is, and is blocked
        lines.append(tb.tb_lineno)
        tb = tb.tb_next
    return lines[1] if len(lines) > 1 else (lines[-1] if lines else None)


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: B036 - the program may have replaced or closed the streams
            pass


if __name__ == "__main__":
    _main()
