"""A run's label: what its model has seen, which only rises within the run."""

from __future__ import annotations

from typing import Any, Final, final

import attrs

from nrllm_core._values import DataClass, Integrity

__all__ = ["LabelSource", "RunLabel"]

# The source of a label nrllm cannot tell the history of.
_UNKNOWN_SOURCE: Final = "unknown"
# How much of an untrusted result a person deciding a turn is shown of it.
_EXCERPT_CHARS: Final = 160


@final
@attrs.frozen(kw_only=True)
class LabelSource:
    """A call whose untrusted result the model has read: the tool, the call's id and, for the
    person who decides a turn, a short excerpt of what it said (masked; ``None`` where the
    privacy level keeps no content)."""

    tool: str
    call_id: str
    excerpt: str | None = None

    def shown(self, content_kept: bool) -> LabelSource:
        """This source as a person is shown it: its excerpt only where content is kept."""
        if content_kept or self.excerpt is None:
            return self
        return LabelSource(tool=self.tool, call_id=self.call_id)


@final
@attrs.frozen(kw_only=True)
class RunLabel:
    """What a run's model has seen: the most sensitive data class of every tool result sent
    on the wire, and the calls whose results were untrusted, in the order they came. A run
    starts at the least sensitive class, trusted (its prompt is its own people's); the label
    only rises, and it is sealed with a suspension."""

    data_class: DataClass = DataClass.PUBLIC_CONTENT
    untrusted: tuple[LabelSource, ...] = ()

    @property
    def integrity(self) -> Integrity:
        return Integrity.UNTRUSTED if self.untrusted else Integrity.TRUSTED

    def rise(
        self,
        *,
        tool: str,
        call_id: str,
        data_class: DataClass,
        integrity: Integrity,
        read: str | None = None,
    ) -> RunLabel:
        """The label once the model has read this call's result (``read``: what it said)."""
        untrusted = self.untrusted
        if integrity is Integrity.UNTRUSTED:
            source = LabelSource(tool=tool, call_id=call_id, excerpt=_excerpt(read))
            untrusted = (*untrusted, source)
        return RunLabel(data_class=max(self.data_class, data_class), untrusted=untrusted)

    def shown(self, content_kept: bool) -> tuple[LabelSource, ...]:
        """The untrusted sources as a person deciding a turn is shown them."""
        return tuple(source.shown(content_kept) for source in self.untrusted)

    def audited(self) -> dict[str, Any]:
        """The label as an audit step keeps it below ``full``: the class, the integrity and
        the tools that brought untrusted text (call ids are the model's text)."""
        return {
            "data_class": self.data_class.value,
            "integrity": self.integrity.value,
            "untrusted_from": list(dict.fromkeys(s.tool for s in self.untrusted)),
        }

    @classmethod
    def unknown(cls) -> RunLabel:
        """The strictest label: what a run whose history nrllm cannot tell has seen (a state
        sealed before labels were, say): every class, and untrusted text."""
        return cls(
            data_class=DataClass.SECRET_ADJACENT,
            untrusted=(LabelSource(tool=_UNKNOWN_SOURCE, call_id=_UNKNOWN_SOURCE),),
        )


def _excerpt(text: str | None) -> str | None:
    """The start of ``text`` on one line, its credentials masked, cut short."""
    if not text:
        return None
    from nrllm_core.redact import mask_secrets

    line = " ".join(mask_secrets(text[: 4 * _EXCERPT_CHARS]).split())
    return line if len(line) <= _EXCERPT_CHARS else line[: _EXCERPT_CHARS - 1] + "…"
