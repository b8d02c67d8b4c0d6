"""``python -m nrllm_core`` runs the ``nrllm`` command."""

from nrllm_core.cli import main

main()
