"""Synthetic tasks in the public schemas of GSM8K, CNN/DM, XSum and MBPP, deterministic by seed.

They exist so that everything (the embedded model trio, tests, benchmarks) runs offline; rows are labelled
synthetic by the loaders. The texts are built for speculative decoding research: many equally valid wordings
whose probabilities depend on the context (a name or item chosen in the prompt and re-used, pronouns that
follow the name, a "voice" of connectives set by the question, which facts an article mentioned first),
while correctness hinges on a few critical tokens (numbers, the final answer, code).

Wording style: every free paraphrase choice on the completion side (which sentence form, connective, opener,
bullet, summary form, code variant) is drawn with `_pick` under a *style*: "a" (uniform; the corpus the target
and amateur learn from), "b" (the same options, with a strong preference for the later ones; the draft's
corpus) or "c" (a still stronger one, for drafts whose wording departs further), as real drafts come from other corpora with other paraphrase preferences. Content (numbers, names,
items, operations, which facts) never depends on the style, so a style-b completion is a correct answer too.

Splits: every candidate row is assigned to "train" or "test" by a stable hash of its canonical content
(the prompt-side text), so train and test never share a problem, whatever the seeds. The rng is derived
from (task, split, seed), so the same arguments give the same rows.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable

TASKS = ("gsm8k", "cnndm", "xsum", "mbpp")
SPLITS = ("train", "test")
TEST_BUCKETS = 8  # 1/8 of the canonical problem space is held out for "test"

# Completion-length caps (characters) below the tasks' max_new_tokens, so the gold text plus EOS fits.
MAX_GSM8K_ANSWER = 190
MAX_HIGHLIGHTS = 190
MAX_XSUM_SUMMARY = 95
MAX_MBPP_CODE = 150


def _split_of(canonical: str) -> str:
    h = int.from_bytes(hashlib.sha256(canonical.encode()).digest()[:8], "big")
    return "test" if h % TEST_BUCKETS == 0 else "train"


def _rng(task: str, split: str, seed: int) -> random.Random:
    return random.Random(f"{task}/{split}/{int(seed)}")


STYLES = ("a", "b", "c")
# style b weighs option i by 3**i: [.25, .75] for two options, [.08, .23, .69] for three; style c by 10**i (a
# stronger preference: [.09, .91], [.01, .09, .90]), for a draft whose wording departs further from the target's
STYLE_BASES = {"b": 3.0, "c": 10.0}


def _pick(rng: random.Random, options: list, style: str):
    """A free paraphrase choice: uniform under style "a" (the same rng draw as rng.choice), skewed to the later
    options under styles "b" and "c"."""
    if style == "a":
        return rng.choice(options)
    return rng.choices(options, weights=[STYLE_BASES[style] ** i for i in range(len(options))])[0]


# ============================================================== shared vocabulary
NAMES = [  # (name, pronoun subject, possessive); diverse first letters so the first character matters
    ("Ava", "she", "her"), ("Ben", "he", "his"), ("Chloe", "she", "her"), ("Dan", "he", "his"),
    ("Emma", "she", "her"), ("Finn", "he", "his"), ("Grace", "she", "her"), ("Hugo", "he", "his"),
    ("Iris", "she", "her"), ("Jack", "he", "his"), ("Kate", "she", "her"), ("Leo", "he", "his"),
    ("Mia", "she", "her"), ("Noah", "he", "his"), ("Olga", "she", "her"), ("Paul", "he", "his"),
    ("Quinn", "she", "her"), ("Ravi", "he", "his"), ("Sara", "she", "her"), ("Tom", "he", "his"),
    ("Uma", "she", "her"), ("Victor", "he", "his"), ("Wendy", "she", "her"), ("Yusuf", "he", "his"),
    ("Zoe", "she", "her"), ("Omar", "he", "his"), ("Nina", "she", "her"), ("Carlos", "he", "his"),
    ("Lily", "she", "her"), ("Sam", "he", "his"), ("Hana", "she", "her"), ("Ivan", "he", "his"),
]
ITEMS = [  # (singular, plural)
    ("apple", "apples"), ("book", "books"), ("marble", "marbles"), ("stamp", "stamps"),
    ("card", "cards"), ("pencil", "pencils"), ("cookie", "cookies"), ("shell", "shells"),
    ("coin", "coins"), ("sticker", "stickers"), ("egg", "eggs"), ("toy car", "toy cars"),
    ("ribbon", "ribbons"), ("candle", "candles"), ("plum", "plums"), ("button", "buttons"),
    ("flower", "flowers"), ("puzzle", "puzzles"), ("muffin", "muffins"), ("kite", "kites"),
]
CONTAINERS = ["bags", "boxes", "packs", "crates", "baskets", "jars"]
SURNAMES = [
    "Smith", "Jones", "Patel", "Brown", "Garcia", "Khan", "Taylor", "Wilson", "Moore", "Clark",
    "Lewis", "Walker", "Young", "King", "Hill", "Scott", "Green", "Baker", "Adams", "Nelson",
]
CITIES = [
    "Leeds", "Bristol", "Dover", "Exeter", "Oxford", "York", "Bath", "Derby", "Perth", "Austin",
    "Denver", "Boston", "Dallas", "Tampa", "Reno", "Salem", "Quincy", "Garland", "Hull", "Wells",
]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "March", "April", "June", "July", "September", "October", "November"]


# ============================================================== gsm8k
# A "voice" set in the question by its connectives; the worked answer mostly keeps that voice's connectives.
Q_CONNECTIVES = [["Then", "After that"], ["Later", "Later on"], ["Next", "The next day"]]
A_CONNECTIVES = [["So", "Thus"], ["Now", "That means"], ["Then", "This way"]]
VOICE_KEEP = 0.8


def _cap(s: str) -> str:
    return s[:1].upper() + s[1:]


def _gsm8k_one(rng: random.Random, steps: tuple[int, int], max_operand: int, style: str = "a") -> dict:
    name, pron, poss = rng.choice(NAMES)
    friend = rng.choice([n for n in NAMES if n[0] != name])[0]
    item, items = rng.choice(ITEMS)
    voice = rng.randrange(len(Q_CONNECTIVES))
    n_lines = rng.randint(*steps)

    def pick(options: list[str]) -> str:  # a free choice of wording (style-dependent)
        return _pick(rng, options, style)

    def qconn() -> str:
        return rng.choice(Q_CONNECTIVES[voice])

    def aconn() -> str:
        pool = A_CONNECTIVES[voice] if rng.random() < VOICE_KEEP else sum(A_CONNECTIVES, [])
        return pick(pool)

    def who() -> str:  # the answer refers to the person by name or pronoun
        return pick([name, pron])

    def has() -> str:
        return pick(["has", "now has"])

    total = rng.randint(3, max(4, max_operand))
    q = [rng.choice([
        f"{name} has {total} {items}.",
        f"{name} owns {total} {items}.",
        f"{name} starts with {total} {items}.",
    ])]
    a: list[str] = []
    # the final question: plain count, selling, or sharing; it uses one answer line when not plain
    final = rng.choice(["count", "count", "sell", "share"]) if n_lines > 1 else "count"
    for _ in range(n_lines - (final != "count")):
        op = rng.choice(["buy", "groups", "give", "lose", "mult"])
        if op in ("give", "lose") and total < 4:
            op = "buy"
        if op == "mult" and total > 3 * max_operand:
            op = "give"
        c = qconn()
        if op == "buy":
            n = rng.randint(2, max_operand)
            new = total + n
            q.append(f"{c}, {pron} buys {n} more {items}.")
            a.append(pick([
                f"{aconn()} {who()} {has()} {total} + {n} = {new} {items}.",
                f"After buying {n} more, {who()} has {total} + {n} = {new}.",
                f"{who()} has {total} + {n} = {new} after buying {n} more.",
            ]))
        elif op == "groups":
            g, k = rng.randint(2, 4), rng.randint(2, max(3, max_operand // 2 + 1))
            m = g * k
            new = total + m
            q.append(f"{c}, {pron} gets {g} {rng.choice(CONTAINERS)} with {k} {items} each.")
            a.append(pick([
                f"{_cap(who())} gets {g} * {k} = {m}, so {total} + {m} = {new}.",
                f"That is {g} * {k} = {m} more, and {total} + {m} = {new}.",
                f"{g} * {k} = {m} more, so {who()} {has()} {total} + {m} = {new}.",
            ]))
        elif op in ("give", "lose"):
            n = rng.randint(1, min(total - 1, max_operand))
            new = total - n
            if op == "give":
                q.append(f"{c}, {pron} gives {n} {items} to {friend}.")
                a.append(pick([
                    f"{aconn()} {who()} has {total} - {n} = {new} {items} left.",
                    f"After giving {n} to {friend}, {total} - {n} = {new} are left.",
                    f"{total} - {n} = {new} are left after giving {n} to {friend}.",
                ]))
            else:
                q.append(f"{c}, {pron} loses {n} of them.")
                a.append(pick([
                    f"{aconn()} {who()} {has()} {total} - {n} = {new} {items}.",
                    f"Losing {n} leaves {total} - {n} = {new}.",
                    f"{total} - {n} = {new} are left after losing {n}.",
                ]))
        else:
            f = 2 if total > max_operand else rng.choice([2, 3])
            word = {2: "doubles", 3: "triples"}[f]
            new = total * f
            q.append(f"{c}, {pron} {word} {poss} {items}.")
            a.append(pick([
                f"{aconn()} {who()} {has()} {total} * {f} = {new} {items}.",
                f"{_cap(word[:-1])}d, that is {total} * {f} = {new}.",
                f"That is {total} * {f} = {new} once {who()} {word} them.",
            ]))
        total = new
    if final == "sell" and total > 4 * max_operand:  # keep products small
        final = "count"
    if final == "sell":
        p = rng.randint(2, 4)
        q.append(f"{_cap(pron)} sells each {item} for ${p}. How much money does {pron} make?")
        res = total * p
        a.append(pick([
            f"{aconn()} {who()} makes {total} * {p} = ${res}.",
            f"Selling {total} at ${p} gives {total} * {p} = ${res}.",
            f"{who()} earns {total} * {p} = ${res} in all.",
        ]))
    elif final == "share":
        divs = [k for k in range(2, 7) if total % k == 0]
        if divs:
            k = rng.choice(divs)
            res = total // k
            q.append(f"{_cap(pron)} shares them equally among {k} friends. How many does each friend get?")
            a.append(pick([
                f"{aconn()} each friend gets {total} / {k} = {res}.",
                f"Each of the {k} friends gets {total} / {k} = {res} {items}.",
                f"{total} / {k} = {res}, so each friend gets {res}.",
            ]))
        else:
            final = "count"
    if final == "count":
        res = total
        q.append(rng.choice([
            f"How many {items} does {name} have now?",
            f"How many {items} does {name} have in the end?",
        ]))
    # formatting and filler: an opening line without numbers, and a bullet before each worked line
    opener = pick(["", "Let's see.", "Step by step:", f"We count the {items}."])
    bullet = pick(["", "- "])
    a = ([opener] if opener else []) + [bullet + _cap(line) for line in a]
    return {"question": " ".join(q), "answer": "\n".join(a) + f"\n#### {res}"}


def gsm8k_row(rng: random.Random, *, steps: tuple[int, int] = (2, 3), max_operand: int = 9,
              style: str = "a") -> dict:
    """One GSM8K-schema problem. Difficulty: `steps` = (min, max) worked lines, `max_operand` operand size;
    `style`: the wording preferences of the worked answer."""
    while True:
        row = _gsm8k_one(rng, steps, max_operand, style)
        if len(row["answer"]) <= MAX_GSM8K_ANSWER:
            return row


# ============================================================== news (cnndm, xsum)
def _person(rng: random.Random) -> tuple[str, str]:
    first = rng.choice(NAMES)[0]
    return first, f"{first} {rng.choice(SURNAMES)}"


def _news_event(rng: random.Random) -> dict:
    """Slots of one news event: a lead sentence, candidate fact sentences (article form + summary forms),
    a quote, and one-sentence summaries."""
    city, day = rng.choice(CITIES), rng.choice(DAYS)
    first, full = _person(rng)
    kind = rng.choice(["fire", "match", "jobs", "council"])
    if kind == "fire":
        place = rng.choice(["school", "warehouse", "hotel", "bakery", "library", "church"])
        n, h = rng.randint(2, 19), rng.randint(2, 9)
        lead = f"A fire destroyed a {place} in {city} on {day}, officials said."
        heads = [f"Fire destroys a {place} in {city}.", f"A {place} in {city} was destroyed by fire."]
        facts = [
            (f"{n} people were taken to hospital.", [f"{n} people were taken to hospital.",
                                                    f"{n} people were treated in hospital."]),
            (f"Firefighters needed {h} hours to put out the flames.", [f"The fire burned for {h} hours.",
                                                                      f"It took {h} hours to put out."]),
            ("The cause of the fire is not yet known.", ["The cause is not yet known.",
                                                         "Police do not know the cause."]),
        ]
        role = "Fire chief"
        quote = "We are lucky no one died."
        one = [f"A fire has destroyed a {place} in {city}, sending {n} people to hospital.",
               f"{n} people are in hospital after a fire at a {place} in {city}."]
    elif kind == "match":
        teams = rng.sample(CITIES, 2)
        a, b = rng.randint(2, 6), rng.randint(0, 1)
        k, fans = rng.randint(2, a), rng.randint(2, 40)
        lead = f"{teams[0]} beat {teams[1]} {a}-{b} on {day} in front of a home crowd."
        heads = [f"{teams[0]} beat {teams[1]} {a}-{b}.", f"{teams[0]} won {a}-{b} against {teams[1]}."]
        facts = [
            (f"{full} scored {k} of the goals.", [f"{first} scored {k} goals.", f"{full} scored {k} times."]),
            (f"About {fans},000 fans watched the match.", [f"{fans},000 fans watched.",
                                                          f"The crowd was {fans},000 strong."]),
            (f"It was the {rng.choice(['third', 'fourth', 'fifth'])} win in a row for the club.",
             ["The club has now won again.", "It is another win in a row."]),
        ]
        first, full = _person(rng)
        role = "Coach"
        quote = "The players gave everything today."
        one = [f"{teams[0]} have beaten {teams[1]} {a}-{b} in front of {fans},000 fans.",
               f"{teams[0]} won {a}-{b} at home against {teams[1]}."]
    elif kind == "jobs":
        company = f"{rng.choice(SURNAMES)} {rng.choice(['Foods', 'Motors', 'Energy', 'Systems', 'Tools'])}"
        place = rng.choice(["factory", "office", "warehouse", "lab"])
        n, m = rng.randint(2, 9) * 50, rng.randint(2, 90)
        month = rng.choice(MONTHS)
        lead = f"{company} will open a new {place} in {city}, the firm said on {day}."
        heads = [f"{company} to open a {place} in {city}.", f"A new {company} {place} is coming to {city}."]
        facts = [
            (f"The site will create {n} jobs.", [f"It will create {n} jobs.", f"{n} new jobs are expected."]),
            (f"The project will cost ${m} million.", [f"It will cost ${m} million.",
                                                      f"The cost is ${m} million."]),
            (f"Work is due to start in {month}.", [f"Work starts in {month}.",
                                                   f"Building begins in {month}."]),
        ]
        role = "Chief executive"
        quote = "This is a great day for the town."
        one = [f"{company} is to open a {place} in {city}, creating {n} jobs.",
               f"A new {place} in {city} will bring {n} jobs, {company} says."]
    else:
        what = rng.choice(["a new park", "a bus lane", "a sports hall", "new homes", "a bridge"])
        a, b = rng.randint(5, 12), rng.randint(1, 4)
        m = rng.randint(2, 60)
        lead = f"The {city} council voted on {day} to build {what}."
        heads = [f"{city} council backs plans for {what}.", f"{city} will build {what}."]
        facts = [
            (f"The plan was backed by {a} votes to {b}.", [f"The vote was {a} to {b}.",
                                                           f"It passed by {a} votes to {b}."]),
            (f"It will cost ${m} million.", [f"It will cost ${m} million.", f"The cost is ${m} million."]),
            ("Some residents have opposed the plan.", ["Some residents oppose it.",
                                                       "The plan has critics."]),
        ]
        role = "Mayor"
        quote = "The town needs this."
        one = [f"Plans for {what} in {city} have been approved by {a} votes to {b}.",
               f"The {city} council has backed {what} at a cost of ${m} million."]
    return {"lead": lead, "heads": heads, "facts": facts, "role": role, "speaker": (first, full),
            "quote": quote, "one": one}


def _news_article(rng: random.Random, ev: dict) -> tuple[str, list[int]]:
    """The article text and the indices of the facts it mentions, in order of mention."""
    order = rng.sample(range(len(ev["facts"])), rng.choice([2, 3]))
    first, full = ev["speaker"]
    quote = rng.choice([f'{ev["role"]} {full} said: "{ev["quote"]}"', f'"{ev["quote"]}" said {full}.'])
    body = [ev["lead"]] + [ev["facts"][i][0] for i in order]
    body.insert(rng.randint(2, len(body)), quote)
    return " ".join(body), order


def cnndm_row(rng: random.Random, style: str = "a") -> dict:
    """One CNN/DM-schema item: a short article; highlights = headline + the first two facts it mentions."""
    while True:
        ev = _news_event(rng)
        article, order = _news_article(rng, ev)
        lines = [_pick(rng, ev["heads"], style)] + [_pick(rng, ev["facts"][i][1], style) for i in order[:2]]
        highlights = "\n".join(lines)
        if len(highlights) <= MAX_HIGHLIGHTS:
            return {"article": article, "highlights": highlights}


def xsum_row(rng: random.Random, style: str = "a") -> dict:
    """One XSum-schema item: a short document and a one-sentence summary."""
    while True:
        ev = _news_event(rng)
        document, _ = _news_article(rng, ev)
        summary = _pick(rng, ev["one"], style)
        if len(summary) <= MAX_XSUM_SUMMARY:
            return {"document": document, "summary": summary}


# ============================================================== mbpp
# Each family: text template, function names, argument kind, parameter generator, reference function,
# code templates (equally valid implementations). {f} function, {a} argument, {k} parameter.
LIST_ARGS = ["nums", "arr", "lst", "numbers", "values", "xs"]
STR_ARGS = ["s", "text", "word", "string"]
INT_ARGS = ["n", "num", "x"]

MBPP_FAMILIES: list[dict] = [
    dict(text="Write a function to find the sum of all elements in a list.", names=["sum_list", "list_sum"],
         arg="list", k=None, ref=lambda xs, k: sum(xs),
         code=["def {f}({a}):\n    return sum({a})",
               "def {f}({a}):\n    total = 0\n    for x in {a}:\n        total += x\n    return total"]),
    dict(text="Write a function to find the largest number in a list.", names=["max_num", "largest"],
         arg="list", k=None, ref=lambda xs, k: max(xs),
         code=["def {f}({a}):\n    return max({a})",
               "def {f}({a}):\n    best = {a}[0]\n    for x in {a}:\n        if x > best:\n"
               "            best = x\n    return best"]),
    dict(text="Write a function to count the numbers greater than {k} in a list.",
         names=["count_greater", "count_above"], arg="list", k=(1, 9),
         ref=lambda xs, k: sum(x > k for x in xs),
         code=["def {f}({a}):\n    return sum(1 for x in {a} if x > {k})",
               "def {f}({a}):\n    c = 0\n    for x in {a}:\n        if x > {k}:\n"
               "            c += 1\n    return c"]),
    dict(text="Write a function to multiply every element of a list by {k}.",
         names=["multiply_all", "scale_list"], arg="list", k=(2, 9), ref=lambda xs, k: [x * k for x in xs],
         code=["def {f}({a}):\n    return [x * {k} for x in {a}]",
               "def {f}({a}):\n    out = []\n    for x in {a}:\n"
               "        out.append(x * {k})\n    return out"]),
    dict(text="Write a function to keep only the even numbers of a list.", names=["even_nums", "get_evens"],
         arg="list", k=None, ref=lambda xs, k: [x for x in xs if x % 2 == 0],
         code=["def {f}({a}):\n    return [x for x in {a} if x % 2 == 0]",
               "def {f}({a}):\n    return list(filter(lambda x: x % 2 == 0, {a}))"]),
    dict(text="Write a function to add {k} to every element of a list.", names=["add_to_all", "shift_list"],
         arg="list", k=(1, 9), ref=lambda xs, k: [x + k for x in xs],
         code=["def {f}({a}):\n    return [x + {k} for x in {a}]",
               "def {f}({a}):\n    return list(map(lambda x: x + {k}, {a}))"]),
    dict(text="Write a function to find the product of all elements in a list.",
         names=["product", "list_product"], arg="list", k=None, ref=lambda xs, k: _prod(xs),
         code=["def {f}({a}):\n    p = 1\n    for x in {a}:\n        p *= x\n    return p"]),
    dict(text="Write a function to reverse a string.", names=["reverse_string", "rev"], arg="str", k=None,
         ref=lambda s, k: s[::-1],
         code=["def {f}({a}):\n    return {a}[::-1]", "def {f}({a}):\n    return ''.join(reversed({a}))"]),
    dict(text="Write a function to count how many times '{k}' occurs in a string.",
         names=["count_char", "char_count"], arg="str", k="char", ref=lambda s, k: s.count(k),
         code=["def {f}({a}):\n    return {a}.count('{k}')",
               "def {f}({a}):\n    return sum(1 for ch in {a} if ch == '{k}')"]),
    dict(text="Write a function to remove every '{k}' from a string.", names=["remove_char", "strip_char"],
         arg="str", k="char", ref=lambda s, k: s.replace(k, ""),
         code=["def {f}({a}):\n    return {a}.replace('{k}', '')",
               "def {f}({a}):\n    return ''.join(ch for ch in {a} if ch != '{k}')"]),
    dict(text="Write a function to check whether a string is a palindrome.",
         names=["is_palindrome", "check_palindrome"], arg="str", k=None, ref=lambda s, k: s == s[::-1],
         code=["def {f}({a}):\n    return {a} == {a}[::-1]"]),
    dict(text="Write a function to find the sum of the digits of a number.",
         names=["digit_sum", "sum_digits"], arg="int", k=None, ref=lambda n, k: sum(int(d) for d in str(n)),
         code=["def {f}({a}):\n    return sum(int(d) for d in str({a}))",
               "def {f}({a}):\n    t = 0\n    while {a} > 0:\n        t += {a} % 10\n"
               "        {a} //= 10\n    return t"]),
    dict(text="Write a function to check whether a number is divisible by {k}.",
         names=["is_divisible", "divisible"], arg="int", k=(2, 9), ref=lambda n, k: n % k == 0,
         code=["def {f}({a}):\n    return {a} % {k} == 0"]),
    dict(text="Write a function to compute the factorial of a number.", names=["factorial", "fact"],
         arg="small", k=None, ref=lambda n, k: _prod(range(1, n + 1)),
         code=["def {f}({a}):\n    r = 1\n    for i in range(2, {a} + 1):\n        r *= i\n    return r"]),
    dict(text="Write a function to return the first {k} multiples of a number.",
         names=["multiples", "first_multiples"], arg="small", k=(2, 5),
         ref=lambda n, k: [n * i for i in range(1, k + 1)],
         code=["def {f}({a}):\n    return [{a} * i for i in range(1, {k} + 1)]"]),
    dict(text="Write a function to square every element of a list.", names=["square_all", "squares"],
         arg="list", k=None, ref=lambda xs, k: [x * x for x in xs],
         code=["def {f}({a}):\n    return [x * x for x in {a}]",
               "def {f}({a}):\n    return [x ** 2 for x in {a}]"]),
]


def _prod(xs) -> int:
    p = 1
    for x in xs:
        p *= x
    return p


def _mbpp_input(rng: random.Random, kind: str, k) -> object:
    if kind == "list":
        return [rng.randint(1, 20) for _ in range(rng.randint(3, 5))]
    if kind == "str":
        letters = "abcdeklmnorst"
        if k is not None and rng.random() < 0.7:  # make sure the character usually occurs
            base = [rng.choice(letters) for _ in range(rng.randint(3, 6))]
            base.insert(rng.randrange(len(base) + 1), k)
            return "".join(base)
        if rng.random() < 0.3:  # palindromes occur
            half = "".join(rng.choice(letters) for _ in range(rng.randint(1, 3)))
            return half + half[::-1][rng.randint(0, 1):]
        return "".join(rng.choice(letters) for _ in range(rng.randint(3, 7)))
    if kind == "small":
        return rng.randint(1, 7)
    return rng.randint(10, 999)


def mbpp_row(rng: random.Random, style: str = "a") -> dict:
    """One MBPP-schema task: text, reference code, three assert tests computed from a reference function."""
    while True:
        fam = rng.choice(MBPP_FAMILIES)
        if fam["k"] is None:
            k = None
        elif fam["k"] == "char":
            k = rng.choice("aeiorst")
        else:
            k = rng.randint(*fam["k"])
        f = rng.choice(fam["names"])
        a = _pick(rng, {"list": LIST_ARGS, "str": STR_ARGS}.get(fam["arg"], INT_ARGS), style)
        code = _pick(rng, fam["code"], style).format(f=f, a=a, k=k)
        tests, seen = [], set()
        while len(tests) < 3:
            x = _mbpp_input(rng, fam["arg"], k)
            if repr(x) in seen:
                continue
            seen.add(repr(x))
            tests.append(f"assert {f}({x!r}) == {fam['ref'](x, k)!r}")
        if len(code) <= MAX_MBPP_CODE:
            text = fam["text"].format(k=k)
            return {"text": text, "code": code, "test_list": tests, "test_setup_code": ""}


# ============================================================== entry point
_GENERATORS: dict[str, tuple[Callable[..., dict], Callable[[dict], str]]] = {
    # task -> (row generator, canonical prompt-side content that defines "the same problem")
    "gsm8k": (gsm8k_row, lambda r: r["question"]),
    "cnndm": (cnndm_row, lambda r: r["article"]),
    "xsum": (xsum_row, lambda r: r["document"]),
    "mbpp": (mbpp_row, lambda r: r["text"] + "\n" + "\n".join(r["test_list"])),
}


def generate(task: str, split: str, n: int, seed: int = 0, *, style: str = "a", **knobs) -> list[dict]:
    """`n` synthetic rows of `task` in its public schema, deterministic in (task, split, n, seed, style, knobs).

    `split` is "train" or "test"; the two never share a problem (hash partition of the canonical content).
    `style`: "a" (default) or "b", the wording preferences of the completions (see the module docstring).
    Knobs (gsm8k only): `steps=(min, max)` worked lines, `max_operand` operand size.
    """
    if task not in _GENERATORS:
        raise ValueError(f"no synthetic generator for task {task!r}; choose one of {', '.join(TASKS)}")
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if knobs and task != "gsm8k":
        raise ValueError(f"task {task!r} takes no generator knobs, got {sorted(knobs)}")
    make, canonical = _GENERATORS[task]
    rng = _rng(task, split, seed)
    rows: list[dict] = []
    tries = 0
    while len(rows) < n:
        row = make(rng, style=style, **knobs)
        tries += 1
        if _split_of(canonical(row)) == split:
            rows.append(row)
        elif tries > 200 * (n + 10):
            raise RuntimeError(f"synthetic {task}: could not draw {n} {split} rows (space too small?)")
    return rows
