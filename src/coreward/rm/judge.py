"""A generative verifier ("LLM as a judge"): an LLM is shown a question, its reference answer and a candidate (a
completion's final answer, or the completion itself) and says whether the candidate is right.

    verdict = parse(LLM(template.format(question, reference, candidate)))  ∈ {1: correct, 0: incorrect, None}

None: the request failed (endpoint down, timeout: `coreward.llm` retries under its deadline first) or the reply
says neither. The formats of published verifiers, each the prompt its model was trained on, verbatim (a verifier
fine-tuned on one wording reads another worse), delivered as its authors deliver it, with their reading of the reply:

  plain                coreward's, the hybrid annotation's (rm/annotate.py): reply YES or NO; any chat LLM
  xverify              IAAR-Shanghai/xVerify: reply "Correct" or "Incorrect"; shown the whole completion; a chat
                       user message. Not shipped (CC BY-NC-ND 4.0): read from the user's `template:` file
  compassverifier      OpenCompass/CompassVerifier CV_PROMPT: reply A (correct), B (incorrect), C (invalid)
  compassverifier_cot  CV_COT_PROMPT: an analysis, then "Final Judgment: \\boxed{A}"; for a general LLM too
  general_verifier     TIGER-Lab/general-verifier (General-Reasoner): "Final Decision: Yes" / "Final Decision: No";
                       shown the final answer (their reward worker extracts the last \\boxed{} first); the raw
                       "User: ... Assistant:" text, no chat template. Not shipped (no licence): a `template:` file

A `template:` file is the template's text or the authors' own Python file (from a clone of their repository); its
sha256 is compared with the authors' text, and a file that differs is used with a warning (`read_template`).

Every step asks each distinct prompt once: a confident policy repeats its answers, and with `shows: answer` the
prompt depends only on (question, reference, final answer), so a group of G rollouts with 2 answers costs 2 calls.
Used by the `judge` reward (rewards/judge.py), Cooper's `positive_judge`, `coreward rm eval --judge` and
`coreward eval --judge`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coreward.llm import GenerationRequest, TextGenerator, build_generator
from coreward.llm.factory import check_endpoint, is_endpoint
from coreward.rm.annotate import JUDGE_PROMPT, parse_verdict
from coreward.runtime.authors_text import AuthorsText, not_shipped, read_authors_text
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

# open-compass/CompassVerifier, src/prompts.py (commit c5d6700, unchanged at 2d7cba6), verbatim: CV_PROMPT and
# CV_COT_PROMPT. Apache-2.0, as the repository's README declares it (its licence badge; the repository holds no LICENSE
# file) and as the CompassVerifier models are published: quoted with attribution (NOTICE).
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

@dataclass(frozen=True)
class JudgeFormat:
    template: str | None  # str.format template shipped with coreward; None: its licence forbids that (`template:` file)
    fields: tuple[str, str, str]  # its placeholders for the question, the reference answer and the candidate
    parse: Callable[[str | None], int | None]  # the reply's verdict: 1, 0, or None (says neither)
    shows: str  # what its authors show as the candidate: "answer" (the final answer) or "completion"
    max_tokens: int  # the reply's budget: a word for a verdict-only model, room for an analysis otherwise
    authors: AuthorsText | None = None  # a published verifier's prompt: where it is, and its hash
    chat: bool = True  # sent as a user message in the model's chat template; False: the raw text (a completion)


XVERIFY = AuthorsText(
    "https://github.com/IAAR-Shanghai/xVerify/blob/5e3606a/src/xVerify/prompts/judge_prompt.py", "PROMPT",
    "CC BY-NC-ND 4.0: no derivatives, non-commercial",
    # PROMPT in src/xVerify/prompts/judge_prompt.py; the copy eval/prompts/judge_prompt.txt (no final newline)
    ("d8a5d3999c304b5ac64690bda8e21444d74cc45ee029078d2141c468ee1179f1",
     "1ec4447661d80cd662c968650ed52ea855062e3355c41d52bfd164b361d947b6"))
GENERAL_VERIFIER = AuthorsText(
    "https://github.com/TIGER-AI-Lab/General-Reasoner/blob/007e44c/verifier.py", "VERIFIER_PROMPT_TEMPLATE",
    "none given: all rights reserved",
    ("5db841af5eef8a3f80ec8f463873ac4a77737e4205331b064d937313d505425a",))
COMPASSVERIFIER = AuthorsText("https://github.com/open-compass/CompassVerifier/blob/c5d6700/src/prompts.py",
                              "CV_PROMPT", "Apache-2.0",
                              ("aee9c27520639ca543f0b5077164dc32c1976be0f16c87bee7055f3b7ba45e72",))
COMPASSVERIFIER_COT = AuthorsText(COMPASSVERIFIER.url, "CV_COT_PROMPT", "Apache-2.0",
                                  ("3d7456fb730b7517ca1f3bc1a28a3cc8847522ea6cc721a4d709f28bd07b4a10",))

JUDGE_FORMATS: dict[str, JudgeFormat] = {
    "plain": JudgeFormat(JUDGE_PROMPT, ("question", "reference", "completion"), parse_verdict, "answer", 16),
    # xVerify's code sends its prompt as the user message (`Model._request_api`; locally, in its model's chat format)
    "xverify": JudgeFormat(None, ("question", "answer", "output"), parse_xverify, "completion", 32, XVERIFY),
    "compassverifier": JudgeFormat(COMPASSVERIFIER_PROMPT, ("question", "gold_answer", "llm_response"),
                                   parse_compassverifier, "completion", 32, COMPASSVERIFIER),
    "compassverifier_cot": JudgeFormat(COMPASSVERIFIER_COT_PROMPT, ("question", "gold_answer", "llm_response"),
                                       parse_compassverifier, "completion", 2048, COMPASSVERIFIER_COT),
    # General-Reasoner's reward worker hands vLLM the raw "User: ... Assistant:" text (`llm.generate(prompts)`), no
    # chat template: an endpoint is asked for a completion (/v1/completions), a local model reads the text as it is
    "general_verifier": JudgeFormat(None, ("question", "ground_truth", "student_answer"), parse_general_verifier,
                                    "answer", 1024, GENERAL_VERIFIER, chat=False),
}


def read_template(format: str, path: str | os.PathLike | None, key: str = "template") -> str:
    """The prompt template of `format`: coreward's copy, or the user's file at `path` (`key` names the setting).

    The file is the template's text, or the authors' own Python file (a clone of their repository): the template
    is then read from the variable that holds it (parsed, not run). A file that differs from the authors' text
    (its sha256) is used with a warning: a verifier fine-tuned on one wording reads another worse."""
    fmt = JUDGE_FORMATS[format]
    what = f"the {format} prompt"
    if path is None:
        if fmt.template is None:
            raise not_shipped(fmt.authors, key, what)
        return fmt.template
    if fmt.authors is not None:
        text = read_authors_text(path, fmt.authors, key, what)
    else:  # coreward's own prompt, replaced by the user's
        try:
            text = Path(path).expanduser().read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise CorewardError(f"{key}: cannot read {path}: {err}") from None
    try:
        text.format(**dict.fromkeys(fmt.fields, ""))
    except (KeyError, IndexError, ValueError) as err:
        raise CorewardError(f"{key}: {path} is not a {format} template: its placeholders are not "
                            f"{', '.join('{' + f + '}' for f in fmt.fields)} ({type(err).__name__}: {err})") from None
    missing = [f for f in fmt.fields if "{" + f + "}" not in text]
    if missing:
        raise CorewardError(f"{key}: {path} is not a {format} template: it has no {{{missing[0]}}}")
    return text


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
    `coreward.llm` generator dict) asked in `format`, with the template of `read_template(format, template)`.
    `key` prefixes errors: the setting that holds the judge (`…params.judge`), beside which `template` sits.
    The template is read, and the generator built, on first use or by `check`."""

    def __init__(self, spec: Any, format: str = "plain", shows: str = "auto", max_chars: int = 4000,
                 max_tokens: int | None = None, temperature: float = 0.0, template: str | os.PathLike | None = None,
                 key: str = "judge", template_key: str = "template"):
        if format not in JUDGE_FORMATS:
            raise CorewardError(f"judge format must be one of {sorted(JUDGE_FORMATS)}, got {format!r}")
        if not spec or not isinstance(spec, (str, dict)):
            raise CorewardError(f"the judge must be an endpoint URL, a model path or hub id, or a generator dict, "
                                f"got {spec!r}")
        self.spec, self.format_name, self.format = spec, format, JUDGE_FORMATS[format]
        self.shows = self.format.shows if shows == "auto" else shows
        self.max_chars, self.temperature = max_chars, temperature
        self.max_tokens = max_tokens or self.format.max_tokens
        self.template_path, self.key, self.template_key = template, key, template_key
        self._template: str | None = None
        self._generator: TextGenerator | None = None

    @property
    def template(self) -> str:
        if self._template is None:
            self._template = read_template(self.format_name, self.template_path, self.template_key)
        return self._template

    def prompt(self, question: str, reference: str, completion: str, answer: str | None) -> str:
        q, ref, cand = self.format.fields
        text = candidate_text(completion, answer, self.shows, self.max_chars)
        return self.template.format(**{q: question, ref: reference, cand: text})

    def ask(self, prompts: Sequence[str]) -> Verdicts:
        """Each distinct prompt once, concurrently (the endpoint's `max_concurrency`, retries and deadline) or in
        the local model's batches; every row gets its prompt's verdict."""
        unique = list(dict.fromkeys(prompts))
        if not unique:
            return Verdicts([])
        if self._generator is None:
            self._generator = build_generator(self.spec)
        requests = [GenerationRequest.user(p, temperature=self.temperature, max_tokens=self.max_tokens,
                                           raw=not self.format.chat) for p in unique]
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

    def check(self) -> None:
        """Before any work (CorewardError naming `key` or `template_key`): the template reads; an endpoint answers
        and serves the named model; a local model's files load (`runtime/model_files.py`: no weights read)."""
        _ = self.template
        if is_endpoint(self.spec):
            check_endpoint(self.spec, f"{self.key}: the judge cannot give verdicts")
            return
        if isinstance(self.spec, dict):
            name, key = self.spec.get("model_name_or_path"), f"{self.key}.model_name_or_path"
            if not isinstance(name, (str, os.PathLike)):  # an unknown backend or option: the factory says which
                try:
                    build_generator(self.spec)
                except CorewardError as err:
                    raise CorewardError(f"{self.key}: {err}") from None
                return
        else:
            name, key = self.spec, self.key
        check_local_judge(str(name), key)

    def close(self) -> None:
        if self._generator is not None:
            self._generator.close()
            self._generator = None


def check_local_judge(name: str, key: str) -> None:
    """A judge given as a model directory or hub id loads: the folder's files are whole, and a hub id is in the
    local cache when the hub is offline (`HF_HUB_OFFLINE`), one line each. An asset name (`demo`) is refused: the
    demo policy writes arithmetic, never a verdict, so every request would come back unreadable."""
    import huggingface_hub.constants as hub

    from coreward.runtime.assets import is_asset, is_path_like
    from coreward.runtime.model_files import check_model

    if is_asset(name) or (":" in name and is_asset(name.partition(":")[0])):
        raise CorewardError(f"{key}: {name!r} names a demo model, which writes arithmetic, not verdicts: a judge is an "
                            "instruction-following LLM (an endpoint http://host:port/v1#model, a model directory or "
                            "a hub id); the CPU demo has none")
    folder = Path(name).expanduser()
    if not folder.is_dir() and is_path_like(name):
        raise CorewardError(f"{key}: no such directory: {name} (give a saved model directory, a hub id, or an "
                            "endpoint http://host:port/v1#model)")
    if not folder.is_dir() and hub.HF_HUB_OFFLINE:
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(name, "config.json"), str):
            raise CorewardError(f"{key}: {name!r} is a hub id, the hub is offline (HF_HUB_OFFLINE) and it is not in "
                                f"the local cache ({hub.HF_HUB_CACHE}): download it where there is network "
                                f"(`hf download {name}`), or give a saved model directory")
    check_model(name, "policy", key=key, assets=False)
