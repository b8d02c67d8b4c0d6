"""The inspector: a local web playground, a live run stream, the audit view and an inbox.

Starlette loads when :func:`create_app` is called, never at ``import nrllm_core``.
"""

from __future__ import annotations

from nrllm_core.inspector._app import create_app
from nrllm_core.inspector._questions import PageQuestions

__all__ = ["PageQuestions", "create_app"]
