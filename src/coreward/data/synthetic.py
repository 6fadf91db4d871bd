"""The demo task: short multi-step arithmetic word problems that a ~1M-parameter model learns on CPU.

At this scale every token costs (see DESIGN.md, "The demo task"), so the prose is a handful of short
templates over a tiny vocabulary and the difficulty comes from the arithmetic: a start value and two or
three additions/subtractions of numbers below 100, e.g.

    Ann has 12 apples, buys 5, sells 3. How many?   ->   12+5=17;17-3=14;#### 14

A problem is a `DemoProblem` (numbers and operations); its question is that problem rendered by one
template. Rendering the same problem with another template, name and item gives the rephrasing that
Co-rewarding-I pairs with the question (same numbers, same relations, same answer), and any question can
be parsed back into its problem, so a `Record` needs to carry nothing beyond its text.

Solutions end in one of several answer formats: `#### r` and `\\boxed{r}`, which the rule verifier
extracts, and `ans r`, which it does not, so that a rule-based reward is precise but brittle.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, replace
from functools import cache
from typing import TYPE_CHECKING

from coreward.runtime.errors import CorewardError


if TYPE_CHECKING:
    from coreward.data.records import Record


@dataclass(frozen=True)
class Template:
    """One wording: `{name} {intro} {a} {item}, {plus} n, {minus} n. {ask}`."""

    intro: str
    plus: str
    minus: str
    ask: str


TEMPLATES = (
    Template("has", "buys", "sells", "How many?"),
    Template("had", "found", "lost", "How many left?"),
    Template("starts with", "gets", "gives", "How many now?"),
    Template("owns", "wins", "uses", "How many in the end?"),
)
NAMES = ("Ann", "Bob", "Sue", "Tom")
ITEMS = ("apples", "pens", "cards", "eggs")

# Final answer lines of a solution. The rule verifier extracts `#### r` and `\boxed{r}` only.
ANSWER_FORMATS = {"hash": "#### {}", "boxed": "\\boxed{{{}}}", "ans": "ans {}"}
VERIFIABLE_FORMATS = ("hash", "boxed")

SPLIT_SIZES = {"train": 20_000, "test": 500}
_SPLIT_SEEDS = {"train": 20_251, "test": 90_417}
MAX_VALUE = 99  # every number (operand, intermediate, answer) stays below 100: at most two digit tokens
STEP_WEIGHTS = {2: 0.5, 3: 0.5}  # number of operations per problem


@dataclass(frozen=True)
class DemoProblem:
    """A start value and a sequence of (`+`|`-`, operand) operations, plus how it is worded."""

    start: int
    ops: tuple[tuple[str, int], ...]
    template: int = 0
    name: str = NAMES[0]
    item: str = ITEMS[0]

    @property
    def values(self) -> list[int]:
        """The running value after each operation (the last one is the answer)."""
        values, value = [], self.start
        for op, n in self.ops:
            value = value + n if op == "+" else value - n
            values.append(value)
        return values

    @property
    def answer(self) -> int:
        return self.values[-1]

    @property
    def key(self) -> tuple:
        """The math alone: problems with equal keys are the same problem in other words."""
        return (self.start, self.ops)

    def question(self) -> str:
        t = TEMPLATES[self.template]
        steps = ", ".join(f"{t.plus if op == '+' else t.minus} {n}" for op, n in self.ops)
        return f"{self.name} {t.intro} {self.start} {self.item}, {steps}. {t.ask}"

    def solution(self, answer_format: str = "hash") -> str:
        """Worked steps `a+b=s;s-c=r;` then the final answer line in `answer_format`."""
        if answer_format not in ANSWER_FORMATS:
            raise CorewardError(f"unknown demo answer format {answer_format!r} (known: {', '.join(ANSWER_FORMATS)})")
        steps, value = [], self.start
        for (op, n), result in zip(self.ops, self.values):
            steps.append(f"{value}{op}{n}={result};")
            value = result
        return "".join(steps) + ANSWER_FORMATS[answer_format].format(self.answer)

    def rephrased(self) -> DemoProblem:
        """The same math told with the next template, name and item."""
        return replace(
            self,
            template=(self.template + 1) % len(TEMPLATES),
            name=NAMES[(NAMES.index(self.name) + 1) % len(NAMES)],
            item=ITEMS[(ITEMS.index(self.item) + 1) % len(ITEMS)],
        )


def _question_pattern(t: Template) -> re.Pattern:
    verbs = f"{re.escape(t.plus)}|{re.escape(t.minus)}"
    return re.compile(
        rf"(?P<name>{'|'.join(NAMES)}) {re.escape(t.intro)} (?P<start>\d+) (?P<item>{'|'.join(ITEMS)})"
        rf"(?P<ops>(?:, (?:{verbs}) \d+)+)\. {re.escape(t.ask)}"
    )


_PATTERNS = tuple(_question_pattern(t) for t in TEMPLATES)


def parse_demo(question: str) -> DemoProblem:
    """Recover the problem behind a demo question (raises CorewardError for any other text)."""
    for index, (t, pattern) in enumerate(zip(TEMPLATES, _PATTERNS)):
        match = pattern.fullmatch(question.strip())
        if match:
            ops = tuple(
                ("+" if verb == t.plus else "-", int(n))
                for verb, n in re.findall(rf"({re.escape(t.plus)}|{re.escape(t.minus)}) (\d+)", match["ops"])
            )
            return DemoProblem(int(match["start"]), ops, index, match["name"], match["item"])
    raise CorewardError(f"not a demo question: {question[:80]!r}")


def rephrase_demo(question: str) -> str:
    """A rephrasing of a demo question: another template, name and item; same numbers, relations, answer."""
    return parse_demo(question).rephrased().question()


def demo_rephrasing(record: Record) -> str:
    return rephrase_demo(record.question)


def demo_solution(record: Record, answer_format: str = "hash") -> str:
    """The worked solution of a demo record with its final answer in `answer_format` (see ANSWER_FORMATS)."""
    return parse_demo(record.question).solution(answer_format)


def demo_answer_in_any_format(text: str) -> str | None:
    """The final answer of a completion in any demo format: the *true* answer, unlike the strict verifier.

    Used to measure how much the rule verifier misses; an RL reward must not use it.
    """
    matches = re.findall(r"(?:####\s*|\\boxed\{|ans\s+)(-?\d+)", text)
    return matches[-1] if matches else None


def demo_answer_format(text: str) -> str | None:
    """Which of ANSWER_FORMATS the final answer of a completion is written in (None: no final answer)."""
    patterns = {"hash": r"####\s*-?\d+", "boxed": r"\\boxed\{-?\d+", "ans": r"ans\s+-?\d+"}
    found = {name: match.start() for name, pattern in patterns.items() for match in re.finditer(pattern, text)}
    return max(found, key=found.get) if found else None


def random_problem(rng: random.Random) -> DemoProblem:
    """Draw one problem: operands 1..MAX_VALUE, every intermediate value within 0..MAX_VALUE."""
    n_steps = rng.choices(list(STEP_WEIGHTS), weights=list(STEP_WEIGHTS.values()))[0]
    start = rng.randint(2, MAX_VALUE)
    value, ops = start, []
    for _ in range(n_steps):
        can_add, can_sub = value < MAX_VALUE, value > 1
        op = rng.choice("+-") if can_add and can_sub else ("+" if can_add else "-")
        n = rng.randint(1, MAX_VALUE - value) if op == "+" else rng.randint(1, value - 1)
        value = value + n if op == "+" else value - n
        ops.append((op, n))
    return DemoProblem(start, tuple(ops), rng.randrange(len(TEMPLATES)), rng.choice(NAMES), rng.choice(ITEMS))


@cache
def demo_problems(split: str) -> tuple[DemoProblem, ...]:
    """All problems of a split, deterministic. Test problems never share their math with a train problem."""
    if split not in SPLIT_SIZES:
        raise CorewardError(f"unknown demo split {split!r} (known: {', '.join(SPLIT_SIZES)})")
    excluded = {p.key for p in demo_problems("train")} if split == "test" else set()
    rng = random.Random(_SPLIT_SEEDS[split])
    problems: list[DemoProblem] = []
    while len(problems) < SPLIT_SIZES[split]:
        problem = random_problem(rng)
        if problem.key not in excluded:
            excluded.add(problem.key)
            problems.append(problem)
    return tuple(problems)


def load_demo(split: str, limit: int | None = None) -> list[Record]:
    """The demo split as registry records (answer: the number as a string; solution: `#### r` format)."""
    from coreward.data.records import Record

    problems = demo_problems(split)[:limit]
    return [
        Record(
            id=f"demo-{split}-{i:05d}",
            question=p.question(),
            answer=str(p.answer),
            source="demo",
            split=split,
            solution=p.solution("hash"),
            level=f"{len(p.ops)} steps",
            subject="arithmetic",
        )
        for i, p in enumerate(problems)
    ]
