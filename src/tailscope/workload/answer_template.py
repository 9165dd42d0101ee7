"""Where an agent step's answers go: its ``prompt_template``.

A template is text with placeholders: ``{{answers}}`` (the answers of the calls the step waits for, one paragraph
each, in the order the calls were drawn), ``{{answer_N}}`` (the N-th of them, 1-based; nothing when a session drew
fewer) and ``{{prompt}}`` (the step's own synthesized text, of its ``input_tokens`` length). Everything else is sent
as written. A shared prefix (the agent's system prompt) stays in front of the rendered template.

Pure: parsing (:func:`parse_template`, ``ValueError`` with a one-line reason), rendering (:meth:`AnswerTemplate.render`)
and the rendered prompt's length in tokens (:meth:`AnswerTemplate.tokens`: the load generator's estimate without a
tokenizer and the simulator's prompt length — the literal text at one token per word, as the approximate prompt mode).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

#: the placeholders, as written in a template
PLACEHOLDERS = ("{{answers}}", "{{answer_N}}", "{{prompt}}")
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_ANSWER_N = re.compile(r"answer_(\d+)")
#: answers joined for ``{{answers}}`` (and after the prompt without a template)
ANSWER_SEP = "\n\n"


@dataclass(frozen=True, slots=True)
class AnswerTemplate:
    """A parsed template.

    Attributes:
        parts: literal text (``str``) and placeholders: ``"answers"``, ``"prompt"`` or an answer number (``int``,
            1-based), in order.
    """

    parts: tuple[str | int | tuple[str], ...]

    @property
    def highest_answer(self) -> int:
        """The largest N of the ``{{answer_N}}`` it holds (0 = none)."""
        return max((p for p in self.parts if isinstance(p, int)), default=0)

    @property
    def literal_text(self) -> str:
        """The text sent as written (everything but the placeholders), joined."""
        return "".join(p for p in self.parts if isinstance(p, str))

    @property
    def literal_tokens(self) -> int:
        """The literal text's length at one token per word."""
        return sum(len(p.split()) for p in self.parts if isinstance(p, str))

    def render(self, prompt: str, answers: list[str]) -> str:
        """The prompt text: ``prompt`` is the step's own text, ``answers`` the answers in the calls' order."""
        out: list[str] = []
        for p in self.parts:
            if isinstance(p, str):
                out.append(p)
            elif isinstance(p, int):
                out.append(answers[p - 1] if p <= len(answers) else "")
            elif p[0] == "answers":
                out.append(ANSWER_SEP.join(answers))
            else:
                out.append(prompt)
        return "".join(out)

    def tokens(self, prompt_tokens: int, answer_tokens: list[int]) -> int:
        """The rendered prompt's length: each placeholder's tokens (``prompt_tokens`` for ``{{prompt}}``, the
        answers' for the others) plus the literal text at one token per word."""
        n = self.literal_tokens
        for p in self.parts:
            if isinstance(p, int):
                n += answer_tokens[p - 1] if p <= len(answer_tokens) else 0
            elif isinstance(p, tuple):
                n += sum(answer_tokens) if p[0] == "answers" else prompt_tokens
        return n


@functools.lru_cache(maxsize=256)
def parse_template(text: str) -> AnswerTemplate:
    """Parse ``text``; ``ValueError`` names the first problem (an unknown or malformed placeholder, stray braces, a
    template that places no answer)."""
    parts: list[str | int | tuple[str]] = []
    pos = 0
    for m in _PLACEHOLDER.finditer(text):
        literal = text[pos : m.start()]
        _no_stray(literal)
        if literal:
            parts.append(literal)
        name = m.group(1)
        n = _ANSWER_N.fullmatch(name)
        if name in ("answers", "prompt"):
            parts.append((name,))
        elif n is not None:
            k = int(n.group(1))
            if k < 1:
                raise ValueError(f"{{{{{name}}}}}: answers count from 1 ({{{{answer_1}}}} is the first)")
            parts.append(k)
        else:
            raise ValueError(f"unknown placeholder {{{{{name}}}}} (use {', '.join(PLACEHOLDERS)})")
        pos = m.end()
    tail = text[pos:]
    _no_stray(tail)
    if tail:
        parts.append(tail)
    t = AnswerTemplate(tuple(parts))
    if not any(isinstance(p, int) or p == ("answers",) for p in t.parts):
        raise ValueError("places no answer: put {{answers}} or {{answer_N}} where the answers go")
    return t


def _no_stray(literal: str) -> None:
    for brace in ("{{", "}}"):
        if brace in literal:
            at = literal.index(brace)
            raise ValueError(
                f"stray {brace!r} near {literal[max(0, at - 10) : at + 12]!r}; placeholders are "
                f"{', '.join(PLACEHOLDERS)}"
            )
