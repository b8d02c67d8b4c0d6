"""Generators: one per format, each turning the provider's answer into an artifact."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final, Protocol, final

import attrs

from nrllm_core.log import logger

__all__ = [
    "FinishContext",
    "GenerationFailed",
    "Generator",
    "GeneratorRegistry",
    "Output",
    "SpeechSynthesizer",
    "default_generators",
]


class SpeechSynthesizer(Protocol):
    """Turns a podcast script into audio; ``suffix`` is the audio file's, e.g. ``".mp3"``."""

    suffix: str

    def synthesize(self, script: str) -> bytes: ...


@final
@attrs.frozen(kw_only=True)
class Output:
    """A finished artifact: Markdown, and a file beside it where the format has one."""

    content: str
    file: Path | None = None


class GenerationFailed(Exception):
    """One format failed; the message is fixed text, safe to show. ``content`` keeps what was
    made before the failure (a podcast script without its audio)."""

    def __init__(self, message: str, *, content: str | None = None) -> None:
        super().__init__(message)
        self.content = content


@final
@attrs.frozen(kw_only=True)
class FinishContext:
    """What a generator's ``finish`` may use: the job's folder and the configured speech."""

    folder: Path
    speech_name: str | None
    speech: SpeechSynthesizer | None


def markdown(answer: str, context: FinishContext) -> Output:
    """The answer as it is: the text formats are Markdown."""
    text = answer.strip()
    if not text:
        raise GenerationFailed("The provider returned an empty answer")
    return Output(content=text + "\n")


Finish = Callable[[str, FinishContext], Output]


@final
@attrs.frozen(kw_only=True)
class Generator:
    """A format: the instruction the provider gets, and how its answer becomes the artifact."""

    format: str
    instruction: str
    finish: Finish = markdown


@final
class GeneratorRegistry:
    """Handed to ``nrllm_repurpose_generators``: collects one plugin's generators."""

    __slots__ = ("_generators", "_speech")

    def __init__(self) -> None:
        self._generators: dict[str, Generator] = {}
        self._speech: dict[str, SpeechSynthesizer] = {}

    def register(self, generator: Generator) -> None:
        if not isinstance(generator, Generator):
            raise TypeError("register() takes a Generator")
        if generator.format in self._generators:
            raise ValueError(f"format {generator.format!r} is already registered")
        self._generators[generator.format] = generator

    def register_speech(self, name: str, synthesizer: SpeechSynthesizer) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError("a speech synthesizer's name is a non-empty string")
        if not callable(getattr(synthesizer, "synthesize", None)):
            raise TypeError(f"speech synthesizer {name!r} has no synthesize()")
        if name in self._speech:
            raise ValueError(f"speech synthesizer {name!r} is already registered")
        self._speech[name] = synthesizer

    @property
    def generators(self) -> Mapping[str, Generator]:
        return dict(self._generators)

    @property
    def speech(self) -> Mapping[str, SpeechSynthesizer]:
        return dict(self._speech)


# -- the default formats -------------------------------------------------------------------------

_MERMAID_KINDS: Final = frozenset(
    {
        "flowchart",
        "graph",
        "mindmap",
        "sequenceDiagram",
        "classDiagram",
        "stateDiagram",
        "stateDiagram-v2",
        "erDiagram",
        "timeline",
        "journey",
        "pie",
        "quadrantChart",
    }
)
_FENCE: Final = re.compile(r"```[ \t]*mermaid[ \t]*\n(.*?)```", re.DOTALL)


def mermaid(answer: str, context: FinishContext) -> Output:
    """The Mermaid diagram in the answer, fenced or bare, as a fenced Markdown block."""
    fenced = _FENCE.search(answer)
    code = (fenced.group(1) if fenced else answer).strip()
    first = code.split(None, 1)[0] if code else ""
    if first not in _MERMAID_KINDS:
        raise GenerationFailed("The provider's answer holds no Mermaid diagram")
    return Output(content=f"```mermaid\n{code}\n```\n")


def handout(answer: str, context: FinishContext) -> Output:
    """The handout in Markdown, and the same text printed to ``handout.pdf``."""
    text = markdown(answer, context).content
    path = context.folder / "handout.pdf"
    _render_pdf(text, path)
    return Output(content=text, file=path)


def podcast(answer: str, context: FinishContext) -> Output:
    """The script in Markdown, and its audio where a speech synthesizer is configured."""
    script = markdown(answer, context).content
    if context.speech_name is None:
        raise GenerationFailed(
            "No speech provider is configured ([repurpose] speech_provider), so no audio was "
            "made; the script is kept",
            content=script,
        )
    if context.speech is None:
        raise GenerationFailed(
            f'The speech provider "{context.speech_name}" is not registered by any plugin, so '
            "no audio was made; the script is kept",
            content=script,
        )
    try:
        audio = context.speech.synthesize(script)
    except Exception as exc:
        logger().warning("nrllm.repurpose.speech_failed", error=type(exc).__name__)
        raise GenerationFailed(
            f'The speech provider "{context.speech_name}" failed; the script is kept',
            content=script,
        ) from None
    if not isinstance(audio, bytes) or not audio:
        raise GenerationFailed(
            f'The speech provider "{context.speech_name}" returned no audio; the script is kept',
            content=script,
        )
    path = context.folder / f"podcast{context.speech.suffix}"
    path.write_bytes(audio)
    return Output(content=script, file=path)


def default_generators() -> tuple[Generator, ...]:
    """The nine formats the chat tool offers."""
    return (
        Generator(
            format="podcast",
            instruction=(
                "Write a podcast script for two hosts about the source, about five minutes long, "
                "in Markdown with one line per speaker turn."
            ),
            finish=podcast,
        ),
        Generator(
            format="schaubild",
            instruction=(
                "Draw the source's main ideas and how they connect as one Mermaid diagram "
                "(a flowchart or a mindmap). Answer with the Mermaid code only."
            ),
            finish=mermaid,
        ),
        Generator(
            format="story",
            instruction="Retell the source as a short story in five slides, in Markdown.",
        ),
        Generator(
            format="exec_summary",
            instruction="Write an executive summary of the source in Markdown, at most 200 words.",
        ),
        Generator(
            format="faq",
            instruction="Write a FAQ about the source in Markdown: questions as headings.",
        ),
        Generator(
            format="social_post",
            instruction="Write one social media post about the source, at most 280 characters.",
        ),
        Generator(
            format="newsletter",
            instruction="Write a newsletter section about the source in Markdown.",
        ),
        Generator(
            format="slide_deck",
            instruction=(
                "Write a slide deck about the source in Markdown, slides separated by ---."
            ),
        ),
        Generator(
            format="handout",
            instruction="Write a one-page handout about the source in Markdown.",
            finish=handout,
        ),
    )


# -- the handout's PDF -----------------------------------------------------------------------------

# The PDF's core fonts know Latin-1 only: common typography is mapped, the rest becomes "?".
_LATIN1: Final = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u2013": "-",
        "\u2014": "-",
        "\u2026": "...",
        "\u2022": "-",
    }
)


def _latin1(text: str) -> str:
    return text.translate(_LATIN1).encode("latin-1", "replace").decode("latin-1")


def _render_pdf(text: str, path: Path) -> None:
    from fpdf import FPDF
    from fpdf.enums import XPos, YPos

    pdf = FPDF()
    pdf.set_creator("nrllm-repurpose")
    # The handout is generated by a model; the document says so.
    pdf.set_subject("AI-generated handout")
    pdf.set_auto_page_break(auto=True, margin=15)
    pdf.add_page()
    for line in text.splitlines():
        stripped = line.strip()
        level = len(stripped) - len(stripped.lstrip("#"))
        if 0 < level <= 6 and stripped[level : level + 1] == " ":
            pdf.set_font("helvetica", style="B", size=max(18 - 2 * level, 11))
            body = stripped[level:].strip()
        else:
            pdf.set_font("helvetica", size=11)
            body = "- " + stripped[2:] if stripped.startswith(("- ", "* ")) else stripped
        if not body:
            pdf.ln(4)
            continue
        pdf.multi_cell(0, 6, _latin1(body), new_x=XPos.LMARGIN, new_y=YPos.NEXT)
    path.parent.mkdir(parents=True, exist_ok=True)
    pdf.output(str(path))
