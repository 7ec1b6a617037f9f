"""Code rewards cannot be gamed by a program that answers the tests' comparisons itself: an object whose __eq__
always says True (or __ne__, __lt__, __bool__, a lying subclass of a built-in type, one hidden in a container), a
rebound test helper, or patched builtins. Legitimate solutions, of any return type built-in code compares, still
pass. The parts named "tests" are the checked ones (rewards.sandbox.CHECKED_PARTS)."""

from __future__ import annotations

import pytest

from data.tasks import get_task
from rewards import score
from rewards.sandbox import run_program

ALWAYS_EQUAL = "class X:\n    def __eq__(self, other):\n        return True\n"


def _mbpp(tests: list[str], imports: list[str] | None = None) -> dict:
    return {"test_list": tests, "test_setup_code": "", "test_imports": imports or []}


# (completion, tests): each must score 0; each passes when the test helpers are left out (checked=()), which
# shows the hole it closes.
GAMED = {
    "eq_always_true": ("def add(a, b):\n" + "    " + ALWAYS_EQUAL.replace("\n    ", "\n        ").rstrip()
                       + "\n    return X()\n", ["assert add(2, 2) == 5"]),
    "eq_and_ne": (ALWAYS_EQUAL + "    def __ne__(self, other):\n        return False\n"
                  "def add(a, b):\n    return X()\n", ["assert add(2, 2) == 5", "assert not add(1, 1) != 3"]),
    "reflected_eq": (ALWAYS_EQUAL + "def add(a, b):\n    return X()\n", ["assert 5 == add(2, 2)"]),
    "int_subclass": ("class I(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
                     "def add(a, b):\n    return I(0)\n", ["assert add(2, 2) == 5"]),
    "str_subclass": ("class S(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n"
                     "def greet(n):\n    return S('')\n", ["assert greet('Bo') == 'Hello Bo'"]),
    "in_a_list": (ALWAYS_EQUAL + "def pair(a):\n    return [X(), X()]\n", ["assert pair(3) == [3, 9]"]),
    "in_a_dict": (ALWAYS_EQUAL + "def count(s):\n    return {'a': X()}\n", ["assert count('aab') == {'a': 2}"]),
    "bool_false": ("class F:\n    def __bool__(self):\n        return False\n"
                   "def is_even(n):\n    return F()\n", ["assert not is_even(3)", "assert is_even(4) is not True"]),
    "lt_true": ("class A:\n    def __sub__(self, o):\n        return self\n    def __abs__(self):\n        return self\n"
                "    def __lt__(self, o):\n        return True\n"
                "def area(r):\n    return A()\n", ["assert abs(area(2) - 12.566) < 0.001"]),
    "chained": ("class L:\n    def __lt__(self, o):\n        return True\n    def __gt__(self, o):\n        return True\n"
                "def f(x):\n    return L()\n", ["assert 10 < f(1) < 20"]),
    "contains": ("class C:\n    def __contains__(self, x):\n        return True\n"
                 "def divisors(n):\n    return C()\n", ["assert 7 in divisors(12)"]),
    "rebinds_helper": ("__sandbox_compare__ = lambda *a: True\n__sandbox_truth__ = lambda x: True\n"
                       "def add(a, b):\n    global __sandbox_compare__\n"
                       "    __sandbox_compare__ = lambda *a: True\n    return 0\n",
                       ["assert add(2, 2) == 5", "assert add(1, 1) == 3"]),
    "patches_builtins": ("import builtins\nbuiltins.abs = lambda x: 0\ndef area(r):\n    return 1.0\n",
                         ["assert abs(area(2) - 12.566) < 0.001"]),
}

LEGIT = {
    "plain": ("def add(a, b):\n    return a + b\n", ["assert add(2, 2) == 4", "assert add(1, 1) != 3",
                                                       "assert 1 < add(1, 1) <= 2", "assert add(0, 0) in (0, 1)"]),
    "namedtuple": ("from collections import namedtuple\nP = namedtuple('P', 'x y')\n"
                   "def swap(a, b):\n    return P(b, a)\n", ["assert swap(1, 2) == (2, 1)"]),
    "counter": ("from collections import Counter\ndef count(s):\n    return Counter(s)\n",
                ["assert count('aab') == {'a': 2, 'b': 1}"]),
    "list_subclass": ("class L(list):\n    pass\ndef evens(n):\n    return L(range(0, n, 2))\n",
                      ["assert evens(5) == [0, 2, 4]"]),
    "nested_and_recursive": ("def nest():\n    x = [1, {'a': (2, 3.0)}, {4}, frozenset({5})]\n    x.append(x)\n"
                             "    return x\n", ["r = nest()\nassert r[:4] == [1, {'a': (2, 3.0)}, {4}, frozenset({5})]"
                                               "\nassert r[4] is r"]),
    "match_object": ("import re\ndef starts_ab(s):\n    return re.match('ab', s)\n",
                     ["assert starts_ab('abc')", "assert not starts_ab('ba')", "assert starts_ab('x') is None"]),
    "identity_object": ("class Node:\n    pass\nN = Node()\ndef node():\n    return N\n",
                        ["assert node() == node()", "assert node() is node()", "assert node()"]),
    "isclose_and_sets": ("import math\ndef area(r):\n    return math.pi * r * r\ndef uniq(xs):\n    return list(set(xs))\n",
                         ["assert math.isclose(area(2), 12.566, rel_tol=1e-3)", "assert set(uniq([1, 1, 2])) == {1, 2}",
                          "assert sorted(uniq([3, 1, 3])) == [1, 3]"], ["import math"]),
    "generator_consumed": ("def squares(n):\n    return (i * i for i in range(n))\n",
                           ["assert list(squares(3)) == [0, 1, 4]", "assert sum(squares(3)) == 5"]),
}


def test_gamed_programs_score_zero_and_legit_ones_pass():
    task = get_task("mbpp")
    names = list(GAMED) + list(LEGIT)
    cases = [GAMED.get(n) or LEGIT[n] for n in names]
    completions = [c for c, *_ in cases]
    refs = [_mbpp(c[1], c[2] if len(c) > 2 else None) for c in cases]
    res = score(task, completions, refs, max_workers=2)
    got = dict(zip(names, zip(res.scores, res.details)))
    gamed = {n: d for n, (s, d) in got.items() if n in GAMED and s != 0.0}
    assert not gamed, gamed
    failed = {n: d for n, (s, d) in got.items() if n in LEGIT and s != 1.0}
    assert not failed, failed
    assert "not trusted" in got["eq_always_true"][1]["error"]  # the reason is said, not a bare failure


@pytest.mark.parametrize("name", ["eq_always_true", "lt_true", "bool_false", "patches_builtins"])
def test_the_holes_were_real(name):
    """Without the checked tests part, the same programs pass: the first test is not vacuous."""
    completion, tests = GAMED[name][:2]
    parts = [("completion", completion), ("tests", "\n".join(tests) + "\n")]
    assert run_program(parts, checked=()).passed
    assert not run_program(parts).passed


def test_humaneval_check_function_is_checked():
    """HumanEval's tests define check(candidate) and call it: comparisons inside that function are checked too."""
    ref = {"prompt": "def double(x: int) -> int:\n", "entry_point": "double",
           "test": "def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(0) == 0\n"}
    hack = "    class X:\n        def __eq__(self, o):\n            return True\n    return X()\n"
    res = score("humaneval", [hack, "    return 2 * x\n"], [ref, ref])
    assert res.scores == [0.0, 1.0], res.details
