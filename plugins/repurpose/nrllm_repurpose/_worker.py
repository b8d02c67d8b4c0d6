"""The worker: claims queued jobs and runs each through ingestion, the gate and generation."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

import attrs

from nrllm_core import ChatMessage, DataClass, HostConfig, ProviderError, build_provider
from nrllm_core.log import logger
from nrllm_repurpose._generate import FinishContext, GenerationFailed, GeneratorRegistry
from nrllm_repurpose._ingest import IngestionFailed, ingest
from nrllm_repurpose._parse import ParseLimits
from nrllm_repurpose._records import ArtifactStatus, Claim, JobStatus
from nrllm_repurpose._registry import build_registry
from nrllm_repurpose._settings import SECTION, RepurposeSettings, SettingsError, load_settings
from nrllm_repurpose._store import JobStore, LeaseLost

if TYPE_CHECKING:
    from nrllm_core import PluginManager, Provider

__all__ = ["CRASHED", "Worker", "settings_for", "worker_id"]

CRASHED: Final = "Generation failed"
# The source text the provider gets: long pages are cut here, not at the provider's limit.
MAX_SOURCE_CHARS: Final = 60_000
_SYSTEM: Final = (
    "You turn one source document into other formats. Use only facts from the source. "
    "Answer with the requested format only, in the source's language."
)
_NO_PROVIDER: Final = (
    "No provider for generation: [repurpose] provider must name a [providers] section"
)
# Stands in for a format whose request failed, so the next format keeps its turn.
_NO_ANSWER: Final = "(no answer)"


def settings_for(config: HostConfig) -> RepurposeSettings:
    """``[repurpose]`` checked against the host: jobs share the audit's database."""
    settings = load_settings(config.plugin_settings.get(SECTION, {}))
    if settings.store_url != config.store.url:
        raise SettingsError(
            f"{SECTION}.store_url: must be the same as [store] url, so that jobs are kept in "
            "the audit's database"
        )
    return settings


def worker_id(index: int) -> str:
    """Unique per thread and per start: a restarted worker never mistakes an old lease."""
    return f"{socket.gethostname()[:30]}:{os.getpid()}:{index}:{uuid.uuid4().hex[:8]}"


@final
@attrs.frozen(kw_only=True)
class Worker:
    """Everything a worker thread shares: the store, the plugins and how to read the config."""

    store: JobStore
    pm: PluginManager
    load_config: Callable[[], HostConfig]
    data_dir: Path
    environ: Mapping[str, str]
    registry: GeneratorRegistry = attrs.field()

    @registry.default
    def _registry(self) -> GeneratorRegistry:
        return build_registry(self.pm)

    def run(self, *, once: bool, concurrency: int, stop: threading.Event | None = None) -> int:
        """Process jobs on ``concurrency`` threads; with ``once``, until none is queued.

        Returns how many jobs were processed.
        """
        stop = stop or threading.Event()
        counts = [0] * concurrency

        def loop(index: int) -> None:
            me = worker_id(index)
            while not stop.is_set():
                try:
                    settings = settings_for(self.load_config())
                except Exception:
                    # Without usable settings nothing is claimed: the jobs wait, queued.
                    logger().error("nrllm.repurpose.config_failed", worker=me, exc_info=True)
                    return
                claim = self.store.claim(me, lease_seconds=settings.lease_seconds)
                if claim is None:
                    if once:
                        return
                    stop.wait(settings.poll_seconds)
                    continue
                self.process(claim, lease_seconds=settings.lease_seconds)
                counts[index] += 1

        threads = [
            threading.Thread(target=loop, args=(i,), name=f"repurpose-{i}")
            for i in range(concurrency)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return sum(counts)

    def process(self, claim: Claim, *, lease_seconds: int) -> None:
        """Run one claimed job to a final status; a crash stores :data:`CRASHED` only.

        A heartbeat keeps the lease (claimed for ``lease_seconds``) while the job runs."""
        log = logger().bind(job=claim.uid, attempt=claim.attempt, worker=claim.worker)
        try:
            with _heartbeat(self.store, claim, lease_seconds):
                self._process(claim)
        except LeaseLost:
            log.warning("nrllm.repurpose.lease_lost")
        except Exception:
            log.error("nrllm.repurpose.job_crashed", exc_info=True)
            try:
                self.store.finish(claim, JobStatus.FAILED, CRASHED)
            except LeaseLost:
                log.warning("nrllm.repurpose.lease_lost")

    def _process(self, claim: Claim) -> None:
        config = self.load_config()
        settings = settings_for(config)
        lease = settings.lease_seconds
        name = settings.provider
        refusal = _gate(config, name, settings.source_data_class)
        if name is None or refusal is not None:
            # Checked before the fetch: a source the provider may not see is never read.
            self.store.finish(claim, JobStatus.FAILED, refusal or _NO_PROVIDER)
            return
        try:
            text = ingest(
                claim.source_url,
                claim.source_type,
                allow_hosts=settings.allow_hosts,
                limits=ParseLimits(
                    cpu_seconds=settings.parse_cpu_seconds, memory_mib=settings.parse_memory_mib
                ),
            )
        except IngestionFailed as exc:
            self.store.finish(claim, JobStatus.FAILED, str(exc))
            return
        self.store.advance(claim, JobStatus.ANALYZING, lease_seconds=lease)
        source = _prepare(text)
        try:
            provider = build_provider(
                self.pm.provider_registry(),
                name,
                attrs.asdict(config.providers[name]),
                config_dir=config.config_dir,
                environ=self.environ,
            )
        except ProviderError as exc:
            # A provider's messages are safe to show: no key, no answer body.
            self.store.finish(claim, JobStatus.FAILED, str(exc))
            return
        self.store.start_generating(claim, claim.formats, lease_seconds=lease)
        folder = _output_folder(config, settings, self.data_dir) / f"job-{claim.uid}"
        folder.mkdir(parents=True, exist_ok=True)
        finish_context = FinishContext(
            folder=folder,
            speech_name=settings.speech_provider,
            speech=self.registry.speech.get(settings.speech_provider or ""),
        )
        failed = self._generate(claim, provider, source, finish_context, lease)
        total = len(claim.formats)
        if failed == 0:
            self.store.finish(claim, JobStatus.DONE, None)
        elif failed == total:
            self.store.finish(
                claim,
                JobStatus.FAILED,
                f"All {total} formats failed; each artifact shows its error",
            )
        else:
            self.store.finish(
                claim,
                JobStatus.PARTIALLY_DONE,
                f"{failed} of {total} formats failed; each failed artifact shows its error",
            )

    def _generate(
        self,
        claim: Claim,
        provider: Provider,
        source: str,
        context: FinishContext,
        lease: int,
    ) -> int:
        """Each format in the caller's order, in one conversation: format N is the model's
        turn N, so a scripted provider answers each format with its own turn."""
        messages = [ChatMessage.system(_SYSTEM)]
        failed = 0
        generators = self.registry.generators
        for index, name in enumerate(claim.formats):
            generator = generators.get(name)
            ask = generator.instruction if generator else f"Write the format {name}."
            if index == 0:
                ask = f"The source:\n\n{source}\n\n---\n\n{ask}"
            messages.append(ChatMessage.user(ask))
            answer = _NO_ANSWER
            content: str | None = None
            file_path: str | None = None
            error: str | None = None
            try:
                if generator is None:
                    raise GenerationFailed(f'No generator is registered for the format "{name}"')
                try:
                    answer = provider.complete(messages, []).content
                except ProviderError as exc:
                    raise GenerationFailed(str(exc)) from None
                output = generator.finish(answer, context)
                content = output.content
                file_path = None if output.file is None else str(output.file)
            except GenerationFailed as exc:
                error, content = str(exc), exc.content
            except Exception:
                logger().error(
                    "nrllm.repurpose.format_crashed", job=claim.uid, format=name, exc_info=True
                )
                error, content = CRASHED, None
            messages.append(ChatMessage.assistant(answer or _NO_ANSWER))
            failed += error is not None
            self.store.record_artifact(
                claim,
                name,
                status=ArtifactStatus.FAILED if error else ArtifactStatus.DONE,
                content=content,
                file_path=file_path,
                error=error,
                lease_seconds=lease,
            )
        return failed


@contextlib.contextmanager
def _heartbeat(store: JobStore, claim: Claim, lease_seconds: int) -> Iterator[None]:
    """Renew the claim's lease every third of ``lease_seconds`` while the block runs.

    Writes alone renew it only between steps, and one fetch, parse or provider call can take
    longer than a lease: another worker would take the job and pay for it again. The thread is
    a daemon, so a worker process that dies stops renewing and its lease runs out."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(lease_seconds / 3):
            try:
                store.renew(claim, lease_seconds=lease_seconds)
            except LeaseLost:
                # Settled, or taken after all: the job's own next write finds out and says so.
                return
            except Exception as exc:
                # The driver's text can hold the database URL and its password.
                logger().warning(
                    "nrllm.repurpose.heartbeat_failed",
                    job=claim.uid,
                    worker=claim.worker,
                    error=type(exc).__name__,
                )

    thread = threading.Thread(target=beat, name=f"repurpose-heartbeat-{claim.uid}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _gate(config: HostConfig, name: str | None, data_class: DataClass) -> str | None:
    if name is None or name not in config.providers:
        return _NO_PROVIDER
    zone = config.zone_for(name)
    if not zone.permits(data_class):
        return (
            f'The provider "{name}" is in the trust zone {zone.value}, which does not permit '
            f"{data_class.value} data; nothing was fetched or generated"
        )
    return None


def _prepare(text: str) -> str:
    lines = [" ".join(line.split()) for line in text.splitlines()]
    compact = "\n".join(line for line in lines if line)
    return compact[:MAX_SOURCE_CHARS]


def _output_folder(config: HostConfig, settings: RepurposeSettings, data_dir: Path) -> Path:
    if settings.output_dir is None:
        return data_dir / "repurpose"
    folder = Path(settings.output_dir).expanduser()
    if not folder.is_absolute() and config.config_dir is not None:
        folder = config.config_dir / folder
    return folder
