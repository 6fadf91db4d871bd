"""A generative verifier ("LLM as a judge"): an LLM is shown a question, its reference answer and a candidate (a
completion's final answer, or the completion itself) and says whether the candidate is right.

    verdict = parse(LLM(template.format(question, reference, candidate)))  ∈ {1: correct, 0: incorrect, None}

None: the request failed (endpoint down, timeout: `coreward.llm` retries under its deadline first) or the reply
says neither. The formats of published verifiers, each the prompt its model was trained on, verbatim (a verifier
fine-tuned on one wording reads another worse), with its authors' reading of the reply:

  plain                coreward's, the hybrid annotation's (rm/annotate.py): reply YES or NO; any chat LLM
  xverify              IAAR-Shanghai/xVerify: reply "Correct" or "Incorrect"; shown the whole completion
  compassverifier      OpenCompass/CompassVerifier CV_PROMPT: reply A (correct), B (incorrect), C (invalid)
  compassverifier_cot  CV_COT_PROMPT: an analysis, then "Final Judgment: \\boxed{A}"; for a general LLM too
  general_verifier     TIGER-Lab/general-verifier (General-Reasoner): "Final Decision: Yes" / "Final Decision: No";
                       shown the final answer (their reward worker extracts the last \\boxed{} first)

Every step asks each distinct prompt once: a confident policy repeats its answers, and with `shows: answer` the
prompt depends only on (question, reference, final answer), so a group of G rollouts with 2 answers costs 2 calls.
Used by the `judge` reward (rewards/judge.py) and by `coreward rm eval --judge` (rm/evaluate.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coreward.llm import GenerationRequest, TextGenerator, build_generator
from coreward.llm.factory import is_endpoint
from coreward.rm.annotate import JUDGE_PROMPT, parse_verdict
from coreward.runtime.errors import CorewardError


# --------------------------------------------------------------------------- reading a reply


def parse_xverify(text: str | None) -> int | None:
    """xVerify's eval.py (`XVerify.evaluate_judgment`): the reply, stripped and lowercased, is "correct" or
    "incorrect", anything else an invalid judgment. Its prompt asks for "[Correct]", so brackets are read too."""
    word = (text or "").strip().strip("[].").strip().lower()
    return {"correct": 1, "incorrect": 0}.get(word)


_CV_BOXED = re.compile(r"boxed\{([ABC])\}")
_CV_WORD = re.compile(r"\b(CORRECT|INCORRECT|INVALID)\b", re.IGNORECASE)
_CV_LETTER = {"CORRECT": "A", "INCORRECT": "B", "INVALID": "C"}


def parse_compassverifier(text: str | None) -> int | None:
    """CompassVerifier's README (`process_judgment`): the last `\\boxed{A|B|C}`, else a bare letter. Their prompt
    also allows the words CORRECT / INCORRECT / INVALID, which their fallback (the last letter A-C after "Final
    Judgment:") reads wrong ("CORRECT" ends in C): the last such word is read here instead. A is correct; B and C
    are incorrect ("Currently, you can treat both B and C as incorrect labels.")."""
    text = (text or "").strip()
    boxed = _CV_BOXED.findall(text)
    if boxed:
        letter = boxed[-1]
    elif text.rstrip(".") in ("A", "B", "C"):
        letter = text.rstrip(".")
    else:
        words = _CV_WORD.findall(text.split("Final Judgment:")[-1])
        if not words:
            return None
        letter = _CV_LETTER[words[-1].upper()]
    return int(letter == "A")


_DECISION = re.compile(r"Final Decision:\s*(Yes|No)\b", re.IGNORECASE)


def parse_general_verifier(text: str | None) -> int | None:
    """General-Reasoner's reward worker: "Final Decision: Yes" in the reply passes (else 0); the last decision
    is read here, and a reply with neither is None (counted) rather than a silent 0."""
    decisions = _DECISION.findall(text or "")
    return None if not decisions else int(decisions[-1].lower() == "yes")


# --------------------------------------------------------------------------- the formats

# IAAR-Shanghai/xVerify, src/xVerify/prompts/judge_prompt.py (commit 5e3606a), verbatim. xVerify's code and
# models are CC BY-NC-ND 4.0: the prompt is quoted here, unchanged and attributed, as the interface of the model.
XVERIFY_PROMPT = '''You are a diligent and precise assistant tasked with evaluating the correctness of responses. You will receive a question, an output sentence, and the correct answer. Your task is to determine if the output sentence accurately answers the question based on the provided correct answer. Respond with either [Correct] or [Incorrect].
-
Special considerations:

1. **Multiple Answers**: If the output contains multiple answers, evaluate whether later answers modify or correct earlier ones. In such cases, compare the final answer with the correct answer. If the final answer is unclear or incorrect, respond with [Incorrect].

2. **Mathematical Problems**: If the formats differ but the answers are mathematically equivalent, respond with [Correct].

3. **Explicit Options**: If the question provides explicit candidate answers, the output will be considered correct if it clearly indicates the correct option's code or the correct option's content.

4. **No Explicit Options**: If the question does not provide explicit options, the output must align with the correct answer in content and meaning to be considered [Correct].
-

Question: """{question}"""

Output sentence: """{output}"""

Correct answer: {answer}

Judgement:
'''  # noqa: E501

# open-compass/CompassVerifier, src/prompts.py (commit c5d6700; the models are Apache-2.0), verbatim: CV_PROMPT and
# CV_COT_PROMPT.
COMPASSVERIFIER_PROMPT = """
Please as a grading expert, judge whether the final answers given by the candidates below are consistent with the standard answers, that is, whether the candidates answered correctly. 
Here are some evaluation criteria:
1. Please refer to the given standard answer. You don't need to re-generate the answer to the question because the standard answer has been given. You only need to judge whether the candidate's answer is consistent with the standard answer according to the form of the question. THE STANDARD ANSWER IS ALWAYS CORRECT AND THE QUESTION IS PERFECTLY VALID. NEVER QUESTION THEM.
2. ONLY compare the FINAL ANSWER - COMPLETELY IGNORE any potential errors in the REASONING PROCESSES.
3. Some answers may be expressed in different ways, such as some answers may be a mathematical expression, some answers may be a textual description, as long as the meaning expressed is the same. Before making a judgment, please understand the question and the standard answer first, and then judge whether the candidate's answer is correct.
4. Some answers may consist of multiple items, such as multiple-choice questions, multiple-select questions, fill-in-the-blank questions, etc. Regardless of the question type, the final answer will be considered correct as long as it matches the standard answer, regardless of whether the reasoning process is correct. For multiple-select questions and multi-blank fill-in-the-blank questions, all corresponding options or blanks must be answered correctly and match the standard answer exactly to be deemed correct.
5. If the prediction is given with \\boxed{{}}, please ignore the \\boxed{{}} and only judge whether the candidate's answer is consistent with the standard answer.
6. If the candidate's answer is invalid (e.g., incomplete (cut off mid-response), lots of unnormal repetitive content, or irrelevant to the question, saying it can't answer the question because some irresistible factors, like ethical issues, no enough information, etc.), select option C (INVALID).Please judge whether the following answers are consistent with the standard answer based on the above criteria. Grade the predicted answer of this new question as one of:
A: CORRECT 
B: INCORRECT
C: INVALID
Just return the letters "A", "B", or "C", with no text around it.
Here is your task. Simply reply with either CORRECT, INCORRECT, or INVALID. Don't apologize or correct yourself if there was a mistake; we are just trying to grade the answer.
<Original Question Begin>:
{question}
<Original Question End>
<Standard Answer Begin>:
{gold_answer}
<Standard Answer End>
<Candidate's Answer Begin>: 
{llm_response}
<Candidate's Answer End>
Judging the correctness of the candidate's answer:
"""  # noqa: E501, W291

COMPASSVERIFIER_COT_PROMPT = """As a grading expert, your task is to determine whether the candidate's final answer matches the provided standard answer. Follow these evaluation guidelines precisely:

Evaluation Protocol:
1. Reference Standard:
   - The standard answer is definitive and always correct
   - The question is perfectly valid - never question them
   - Do not regenerate answers; only compare with the given standard

2. Comparison Method:
   - Carefully analyze the question's requirements and the standard answer's structure
     * Determine whether the question expects exact matching of the entire standard answer or allows partial matching of its components.
     * This determination must be made based on the question's phrasing and the nature of the standard answer.
   - Compare ONLY the candidate's final answer (ignore all reasoning/explanation errors)
   - Disregard any differences in formatting or presentation style
   - For mathematical expressions: calculate step by step whether the two formulas are equivalent
   - For multiple-choice questions: compare only the final choice and corresponding option content

3. Multi-part Answers:
   - For questions requiring multiple responses (e.g., multi-select):
   - All parts must match the standard answer exactly. 
   - Compare each sub-answer step by step. Partial matches are considered incorrect.

4. Validity Check:
   - Reject answers that are:
     * Incomplete (cut off mid-sentence in the final sentence, lacking a complete response) → Label as INCOMPLETE
     * Repetitive (repetition of words or phrases in a loop) → Label as REPETITIVE
     * Explicit refusals (e.g., directly return "I cannot answer/provide/access ...") → Label as REFUSAL
   - For invalid answers, specify the type in the judgment (e.g., \\boxed{{C}} - INCOMPLETE).

Grading Scale:
\\boxed{{A}} - CORRECT: 
   - Answer matches standard exactly (including equivalent expressions)
   - For numerical answers: consider as equivalent if values match when rounded appropriately
   - Semantically equivalent responses

\\boxed{{B}} - INCORRECT:
   - Any deviation from standard answer
   - Partial matches for multi-part questions

\\boxed{{C}} - INCOMPLETE/REPETITIVE/REFUSAL:
   - Fails validity criteria above (must specify: INCOMPLETE/REPETITIVE/REFUSAL)

Execution Steps and Output Formats:

Analysis step by step: [
Thoroughly evaluate the candidate's answer including:
(1) First check if the answer is INCOMPLETE (cut off mid-sentence), REPETITIVE (looping repetition), or a REFUSAL (explicit denial) - if so, immediately classify as \\boxed{{C}} with the corresponding type.
(2) Analyze the question's core requirements and the standard answer's structure, for example:
- Strict requirements: Identify mandatory constraints (e.g., simplification, answer order, multi-part completeness)
- Tolerant allowances: Ignore non-critical deviations (e.g., missing option labels in MCQs, equivalent but unformatted expressions)
- Required answer type, precision level, etc.
(3) Perform a detailed comparison between the candidate's final answer and the standard answer, for example:
- Content equivalence
- Permitted variations in numerical precision
- Allowed expression formats]
Final Judgment: \\boxed{{A/B/C}} - <CORRECT/INCORRECT/INCOMPLETE/REPETITIVE/REFUSAL>

Here is your task.
<Original Question Begin>
{question}
<Original Question End>

<Standard Answer Begin>
{gold_answer}
<Standard Answer End>

<Candidate's Answer Begin>
{llm_response}
<Candidate's Answer End>

Analysis step by step and Final Judgment:
"""  # noqa: E501, W291

# TIGER-Lab/general-verifier's model card and General-Reasoner's reward worker (VERIFIER_PROMPT_TEMPLATE), verbatim:
# a raw "User: ... Assistant:" text, sent as one user message (as OpenAI-compatible servers are asked for it).
GENERAL_VERIFIER_PROMPT = (
    "User: ### Question: {question}\n\n"
    "### Ground Truth Answer: {ground_truth}\n\n"
    "### Student Answer: {student_answer}\n\n"
    "For the above question, please verify if the student's answer is equivalent to the ground truth answer.\n"
    "Do not solve the question by yourself; just check if the student's answer is equivalent to the ground truth answer.\n"
    "If the student's answer is correct, output \"Final Decision: Yes\". If the student's answer is incorrect, output "
    "\"Final Decision: No\". Assistant:"
)


@dataclass(frozen=True)
class JudgeFormat:
    template: str  # str.format template
    fields: tuple[str, str, str]  # its placeholders for the question, the reference answer and the candidate
    parse: Callable[[str | None], int | None]  # the reply's verdict: 1, 0, or None (says neither)
    shows: str  # what its authors show as the candidate: "answer" (the final answer) or "completion"
    max_tokens: int  # the reply's budget: a word for a verdict-only model, room for an analysis otherwise


JUDGE_FORMATS: dict[str, JudgeFormat] = {
    "plain": JudgeFormat(JUDGE_PROMPT, ("question", "reference", "completion"), parse_verdict, "answer", 16),
    "xverify": JudgeFormat(XVERIFY_PROMPT, ("question", "answer", "output"), parse_xverify, "completion", 32),
    "compassverifier": JudgeFormat(COMPASSVERIFIER_PROMPT, ("question", "gold_answer", "llm_response"),
                                   parse_compassverifier, "completion", 32),
    "compassverifier_cot": JudgeFormat(COMPASSVERIFIER_COT_PROMPT, ("question", "gold_answer", "llm_response"),
                                       parse_compassverifier, "completion", 2048),
    "general_verifier": JudgeFormat(GENERAL_VERIFIER_PROMPT, ("question", "ground_truth", "student_answer"),
                                    parse_general_verifier, "answer", 1024),
}


def candidate_text(completion: str, answer: str | None, shows: str, max_chars: int) -> str:
    """What the judge reads as the candidate: the final answer the rule verifier extracted (`shows="answer"`), or
    the completion; a completion over `max_chars` keeps its tail, where the final answer is. With no extracted
    answer the completion stands in for it: the judge then finds the answer the rule verifier could not read."""
    if shows == "answer" and answer is not None:
        return answer
    return completion if len(completion) <= max_chars else "..." + completion[-max_chars:]


# --------------------------------------------------------------------------- asking


@dataclass
class Verdicts:
    """The judge's verdict per asked row (1, 0, None) and what it cost."""

    verdicts: list[int | None]
    calls: int = 0  # requests sent: the distinct prompts
    failed: int = 0  # requests that came back without text (after the endpoint's retries)
    unreadable: int = 0  # replies that say neither correct nor incorrect
    latencies: list[float] = field(default_factory=list)
    last_error: str | None = None  # why the last failed request failed, or the last unreadable reply


class Judge:
    """A judge LLM (`spec`: an endpoint `http://host:port/v1#model`, a local model path or hub id, or a
    `coreward.llm` generator dict) asked in `format`. The generator is built on first use."""

    def __init__(self, spec: Any, format: str = "plain", shows: str = "auto", max_chars: int = 4000,
                 max_tokens: int | None = None, temperature: float = 0.0):
        if format not in JUDGE_FORMATS:
            raise CorewardError(f"judge format must be one of {sorted(JUDGE_FORMATS)}, got {format!r}")
        if not spec or not isinstance(spec, (str, dict)):
            raise CorewardError(f"the judge must be an endpoint URL, a model path or hub id, or a generator dict, "
                                f"got {spec!r}")
        self.spec, self.format = spec, JUDGE_FORMATS[format]
        self.shows = self.format.shows if shows == "auto" else shows
        self.max_chars, self.temperature = max_chars, temperature
        self.max_tokens = max_tokens or self.format.max_tokens
        self._generator: TextGenerator | None = None

    def prompt(self, question: str, reference: str, completion: str, answer: str | None) -> str:
        q, ref, cand = self.format.fields
        text = candidate_text(completion, answer, self.shows, self.max_chars)
        return self.format.template.format(**{q: question, ref: reference, cand: text})

    def ask(self, prompts: Sequence[str]) -> Verdicts:
        """Each distinct prompt once, concurrently (the endpoint's `max_concurrency`, retries and deadline) or in
        the local model's batches; every row gets its prompt's verdict."""
        unique = list(dict.fromkeys(prompts))
        if not unique:
            return Verdicts([])
        if self._generator is None:
            self._generator = build_generator(self.spec)
        requests = [GenerationRequest.user(p, temperature=self.temperature, max_tokens=self.max_tokens) for p in unique]
        results = self._generator.generate(requests)
        outcome = Verdicts([], calls=len(unique), latencies=[r.latency_s for r in results])
        by_prompt = {}
        for prompt, result in zip(unique, results):
            verdict = self.format.parse(result.text) if result.ok else None
            if not result.ok:
                outcome.failed += 1
                outcome.last_error = result.error
            elif verdict is None:
                outcome.unreadable += 1
                outcome.last_error = f"unreadable verdict {result.text[:200]!r}"
            by_prompt[prompt] = verdict
        outcome.verdicts = [by_prompt[p] for p in prompts]
        return outcome

    def judge(self, questions: Sequence[str], references: Sequence[str], completions: Sequence[str],
              answers: Sequence[str | None]) -> Verdicts:
        """The verdict on each (question, reference, completion, its extracted final answer) row."""
        return self.ask([self.prompt(*row) for row in zip(questions, references, completions, answers)])

    def health_check(self) -> None:
        """An endpoint judge answers and serves the named model (CorewardError naming the URL and the cause); a
        local model is loaded, and checked, on first use."""
        if not is_endpoint(self.spec):
            return
        generator = build_generator(self.spec)
        try:
            generator.health_check()
        finally:
            generator.close()

    def close(self) -> None:
        if self._generator is not None:
            self._generator.close()
            self._generator = None
