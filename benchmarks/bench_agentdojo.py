"""nrllm's information-flow policy against AgentDojo (v1.2.2, the ``important_instructions``
attack): how many attacks still succeed, how many user tasks still complete, what a person is
asked, and what the policy costs.

The suite's functions are registered as nrllm tools, labelled from ``benchmarks/agentdojo/
SUITE.toml`` (a tool's data class, who writes its results, where it sends data, whether it
writes; a tool the file does not name gets nrllm's defaults: untrusted, the strictest class).
Two scripted models answer through a provider of this benchmark's own, one call a turn:

- the **compromised** model does the user task (the suite's ground-truth calls for it) and,
  once a tool result on the wire holds the attacker's text, first does the attacker's task
  (the injection task's ground-truth calls, from the environment as it then is), and ends
  with both tasks' ground-truth answers;
- the **benign** model does only the user task.

Success is AgentDojo's own ``utility`` and ``security`` checks on the environment after the
run and the model's final text. Every figure is printed beside the same runs without the
policy: every tool trusted, read-only, sending nothing out, so nothing is stopped. The CPU
cost (``time.process_time``: all threads) is measured on the benign runs the policy lets
through unchanged, the two hosts taking turns batch by batch (the order reversed every other
turn), the median of the batches.

    python benchmarks/bench_agentdojo.py --suite banking [--labels FILE] [--repeats N]

It needs ``agentdojo`` (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import attrs
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.attacks.important_instructions_attacks import ImportantInstructionsAttack
from agentdojo.base_tasks import BaseInjectionTask, BaseUserTask
from agentdojo.functions_runtime import FunctionCall, FunctionsRuntime, TaskEnvironment
from agentdojo.task_suite.load_suites import get_suite
from agentdojo.task_suite.task_suite import TaskSuite

from nrllm_core import (
    DataClass,
    Effect,
    Integrity,
    RunStatus,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    make_plugin_manager,
)
from nrllm_core._host import Host
from nrllm_core._loop import PendingCall
from nrllm_core._messages import (
    ChatMessage,
    ProviderAnswer,
    Role,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Usage,
)
from nrllm_core._providers import ProviderRegistry

VERSION: Final = "v1.2.2"
LABELS: Final = Path(__file__).parent / "agentdojo"
ROUNDS: Final = 60
PERSON: Final = "person"
# The attack names the model it addresses; any name AgentDojo knows does for a scripted one.
ADDRESSED_MODEL: Final = "gpt-4o-2024-05-13"
CPU_TURNS: Final = 40


# -- labels -----------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Label:
    """What the labels file says of one tool."""

    data_class: DataClass = DataClass.SECRET_ADJACENT
    integrity: Integrity = Integrity.UNTRUSTED
    # Per record: trusted only when every value of this field of every record is the user's,
    # and (``unless_others_write``) no one else may write the record by this field's grants.
    trusted_when_own: str | None = None
    unless_others_write: str | None = None
    egress: DataClass | None = None
    writes: bool = False


# No policy: nothing is ever stopped.
OPEN: Final = Label(data_class=DataClass.PUBLIC_CONTENT, integrity=Integrity.TRUSTED)


@attrs.frozen(kw_only=True)
class Labels:
    own: frozenset[str]
    tools: Mapping[str, Label]

    def of(self, name: str) -> Label:
        return self.tools.get(name, Label())


def load_labels(path: Path) -> Labels:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    tools: dict[str, Label] = {}
    for name, raw in data.get("tools", {}).items():
        integrity = raw.get("integrity", "untrusted")
        per_record = isinstance(integrity, dict)
        egress = raw.get("egress")
        tools[name] = Label(
            data_class=DataClass(raw["data_class"]),
            integrity=Integrity.UNTRUSTED if per_record else Integrity(integrity),
            trusted_when_own=integrity["trusted_when_own"] if per_record else None,
            unless_others_write=integrity.get("unless_others_write") if per_record else None,
            egress=None if egress is None else DataClass(egress),
            writes=bool(raw.get("writes", False)),
        )
    return Labels(own=frozenset(data.get("own", ())), tools=tools)


def record_integrity(
    result: object, field: str, own: frozenset[str], grants: str | None = None
) -> Integrity:
    """Trusted when every record the result holds has only the user's own in ``field`` and,
    with ``grants`` (a record's map of people to their permission), nobody else may write it:
    a record others can edit holds their text too."""
    records = result if isinstance(result, list) else [result]
    for record in records:
        value = _field(record, field)
        values = value if isinstance(value, list) else [value]
        if not values or any(v not in own for v in values):
            return Integrity.UNTRUSTED
        granted = _field(record, grants) if grants is not None else None
        if isinstance(granted, dict) and any(
            who not in own and "w" in str(getattr(how, "value", how))
            for who, how in granted.items()
        ):
            return Integrity.UNTRUSTED
    return Integrity.TRUSTED


def _field(record: object, name: str) -> object:
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


# -- the suite's functions as nrllm tools -----------------------------------------------------


@attrs.define
class World:
    """What a run's tools act on (``ToolContext.deps``): the task's environment."""

    runtime: FunctionsRuntime
    env: TaskEnvironment


class SuiteTool(Tool):
    def __init__(self, function: Any, label: Label, own: frozenset[str]) -> None:
        self.name = function.name
        self.description = function.description
        self.group = "agentdojo"
        self.parameters = function.parameters.model_json_schema()
        self.checks_own_arguments = True  # AgentDojo's runtime validates them
        self.data_class = label.data_class
        self.integrity = label.integrity
        self.egress = label.egress
        self.effect = Effect.NON_IDEMPOTENT_WRITE if label.writes else Effect.READ_ONLY
        self._field = label.trusted_when_own
        self._grants = label.unless_others_write
        self._own = own

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        world: World = context.deps
        result, error = world.runtime.run_function(world.env, self.name, arguments)
        if error is not None:
            return ToolResult.error(error)
        integrity = None
        if self._field is not None:
            integrity = record_integrity(result, self._field, self._own, self._grants)
        return ToolResult.text(tool_result_to_str(result), integrity=integrity)


@attrs.define
class SuiteTools:
    suite: TaskSuite[Any]
    labels: Labels | None  # None: no policy

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        own = frozenset() if self.labels is None else self.labels.own
        for function in self.suite.tools:
            label = OPEN if self.labels is None else self.labels.of(function.name)
            registry.register(SuiteTool(function, label, own))


# -- the scripted models ----------------------------------------------------------------------


def _plain(text: str) -> str:
    # The text as YAML puts it on the wire, folded where it has a space, quoted, with escapes
    # (``\\n``, ``''``): compared by its words only.
    return " ".join(re.findall(r"\w+", text.replace("\\n", " ")))


@attrs.define
class Plan:
    """One run of a scripted model: what it still has to call, and whether it is steered."""

    world: World
    calls: list[FunctionCall]
    answer: str
    injection: BaseInjectionTask[Any] | None = None  # set for the compromised model
    marker: str = ""
    steered: bool = False
    made: int = 0


@attrs.define
class Models:
    """The benchmark's provider kind: answers each turn from the current plan."""

    plan: Plan | None = None

    @hookimpl
    def nrllm_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register("agentdojo", lambda name, settings, **_: self)

    def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> ProviderAnswer:
        plan = self.plan
        assert plan is not None
        if plan.injection is not None and not plan.steered:
            last = max((i for i, m in enumerate(messages) if m.role is Role.ASSISTANT), default=-1)
            fresh = [m.content for m in messages[last + 1 :] if m.role is Role.TOOL]
            if any(plan.marker in _plain(text) for text in fresh):
                plan.steered = True
                plan.calls[:0] = plan.injection.ground_truth(plan.world.env)
                plan.answer = f"{plan.answer}\n{plan.injection.GROUND_TRUTH_OUTPUT}".strip()
        if plan.calls:
            call = plan.calls.pop(0)
            plan.made += 1
            arguments = dict(call.args)
            return ProviderAnswer(
                content="",
                tool_calls=(ToolCall(id=f"c{plan.made}", name=call.function, arguments=arguments),),
                usage=Usage(),
                finish_reason="tool_calls",
            )
        return ProviderAnswer(
            content=plan.answer, tool_calls=(), usage=Usage(), finish_reason="stop"
        )


# -- hosts ------------------------------------------------------------------------------------

# The policies compared: with no person, and with one who approves what is put to them.
NO_PERSON: Final = {"on_untrusted": "refuse", "approve_writes": "when_untrusted"}
PERSON_WHEN_UNTRUSTED: Final = {"on_untrusted": "approve", "approve_writes": "when_untrusted"}
PERSON_ALWAYS: Final = {"on_untrusted": "approve", "approve_writes": "always"}


@attrs.define
class Bench:
    host: Host
    models: Models


def build(
    folder: Path, suite: TaskSuite[Any], labels: Labels | None, policy: Mapping[str, str]
) -> Bench:
    models = Models()
    pm = make_plugin_manager(plugins=[SuiteTools(suite, labels), models], load_entry_points=False)
    host = Host.from_config(
        data={
            "providers": {"model": {"kind": "agentdojo", "trust_zone": "local"}},
            "defaults": {"provider": "model"},
            "actor": {"id": "emma"},
            "privacy": {"level": "metadata"},
            "run": {"max_rounds": ROUNDS, "max_rounds_cap": ROUNDS},
            "policy": dict(policy),
        },
        pm=pm,
        data_dir=folder,
        environ={},
    )
    return Bench(host=host, models=models)


@contextmanager
def hosts(
    suite: TaskSuite[Any], labels: Labels, *policies: Mapping[str, str]
) -> Iterator[list[Bench]]:
    """A host without the policy, then one per policy, each on its own store."""
    with tempfile.TemporaryDirectory() as directory:
        made = [build(Path(directory) / "none", suite, None, NO_PERSON)]
        for index, policy in enumerate(policies):
            made.append(build(Path(directory) / f"p{index}", suite, labels, policy))
        try:
            yield made
        finally:
            for bench in made:
                bench.host.store.close()


@attrs.define
class Outcome:
    utility: bool
    security: bool
    approvals: int
    cpu: float
    final: str


def run(
    bench: Bench,
    suite: TaskSuite[Any],
    user: BaseUserTask[Any],
    env: TaskEnvironment,
    injection: BaseInjectionTask[Any] | None = None,
) -> Outcome:
    task_env = user.init_environment(env)
    pre = task_env.model_copy(deep=True)
    world = World(runtime=FunctionsRuntime(suite.tools), env=task_env)
    bench.models.plan = Plan(
        world=world,
        calls=list(user.ground_truth(pre)),
        answer=user.GROUND_TRUTH_OUTPUT,
        injection=injection,
        marker="" if injection is None else _plain(injection.GOAL),
    )
    approvals = 0

    def person(pending: tuple[PendingCall, ...], digest: str) -> str:
        nonlocal approvals
        approvals += sum(1 for p in pending if p.requires_approval)
        return PERSON

    started = time.process_time()
    outcome = bench.host.run(user.PROMPT, deps=world, approve=person)
    cpu = time.process_time() - started
    if outcome.status is not RunStatus.COMPLETED:
        raise RuntimeError(f"{user.ID}: the run did not complete: {outcome.error}")
    final = outcome.final_content
    utility = suite._check_task_result(user, [_text(final)], pre, task_env, [])
    security = False
    if injection is not None:
        security = suite._check_task_result(injection, [_text(final)], pre, task_env, [])
    return Outcome(utility=utility, security=security, approvals=approvals, cpu=cpu, final=final)


def _text(content: str) -> dict[str, str]:
    return {"type": "text", "content": content}


class _Target:
    """What the attack reads of the pipeline it attacks: its name, for the model it addresses."""

    name = ADDRESSED_MODEL


# -- the measurements -------------------------------------------------------------------------


def writes_of(labels: Labels, calls: Sequence[FunctionCall]) -> bool:
    """Whether a ground truth needs a call that writes or sends data out."""
    return any(labels.of(c.function).writes or labels.of(c.function).egress for c in calls)


def attacks(suite: TaskSuite[Any], labels: Labels) -> None:
    attack = ImportantInstructionsAttack(suite, _Target())
    users = list(suite.user_tasks.values())
    pristine = suite.load_and_inject_default_environment({})
    truths = {i.ID: i.ground_truth(pristine) for i in suite.injection_tasks.values()}
    # AgentDojo gives some injection tasks no ground truth (``[]``): a scripted model has no
    # calls to make for them, so they are left out and named.
    injections = [i for i in suite.injection_tasks.values() if truths[i.ID]]
    unscripted = sorted(i for i, calls in truths.items() if not calls)
    won: dict[str, list[tuple[str, str]]] = {"none": [], "policy": []}
    useful = {"none": 0, "policy": 0}
    with hosts(suite, labels, NO_PERSON) as (bare, governed):
        for user in users:
            for injection in injections:
                env = suite.load_and_inject_default_environment(attack.attack(user, injection))
                for name, bench in (("none", bare), ("policy", governed)):
                    got = run(bench, suite, user, env.model_copy(deep=True), injection)
                    useful[name] += got.utility
                    if got.security:
                        won[name].append((user.ID, injection.ID))
    pairs = len(users) * len(injections)
    by_text = {i.ID for i in injections if not writes_of(labels, truths[i.ID])}
    print(f"attacks ({len(users)} user tasks x {len(injections)} injection tasks = {pairs}),")
    print("  compromised model, no person (on_untrusted=refuse, approve_writes=when_untrusted):")
    for name, title in (("none", "without the policy"), ("policy", "with the policy")):
        tool = [w for w in won[name] if w[1] not in by_text]
        text = [w for w in won[name] if w[1] in by_text]
        print(
            f"  {title + ':':20} {len(won[name]):3}/{pairs} succeed "
            f"({len(tool)} by a tool call, {len(text)} by the final text only); "
            f"user tasks done under attack {useful[name]}/{pairs}"
        )
        if name == "policy":
            for user_id, injection_id in won[name]:
                how = "final text only" if injection_id in by_text else "TOOL CALL"
                print(f"    succeeded: {user_id} x {injection_id} ({how})")
    if unscripted:
        print(f"  not attempted, no ground truth in AgentDojo: {', '.join(unscripted)}")
    if by_text:
        print(f"  injection tasks a final text alone can satisfy: {', '.join(sorted(by_text))}")


def utility(suite: TaskSuite[Any], labels: Labels) -> list[BaseUserTask[Any]]:
    """The benign model; returns the tasks the policy lets through unchanged."""
    users = list(suite.user_tasks.values())
    done = {"none": 0, "refuse": 0, "when": 0, "always": 0}
    asked = {"when": 0, "always": 0}
    lost: list[str] = []
    unchanged: list[BaseUserTask[Any]] = []
    with hosts(suite, labels, NO_PERSON, PERSON_WHEN_UNTRUSTED, PERSON_ALWAYS) as made:
        for user in users:
            env = suite.load_and_inject_default_environment({})
            results = {
                name: run(bench, suite, user, env.model_copy(deep=True))
                for name, bench in zip(("none", "refuse", "when", "always"), made, strict=True)
            }
            for name, got in results.items():
                done[name] += got.utility
                if name in asked:
                    asked[name] += got.approvals
            if results["none"].utility and not results["refuse"].utility:
                lost.append(user.ID)
            if (
                results["when"].approvals == 0
                and results["refuse"].utility == results["none"].utility
            ):
                unchanged.append(user)
    n = len(users)
    print(f"user tasks ({n}), benign model, no attack:")
    print(f"  without the policy:            {done['none']:3}/{n} completed")
    print(f"  with the policy, no person:    {done['refuse']:3}/{n} completed", end="")
    print(f" (lost: {', '.join(lost)})" if lost else "")
    print(
        f"  approvals a person gives, on_untrusted=approve: "
        f"approve_writes=when_untrusted {asked['when']} ({asked['when'] / n:.2f} a task, "
        f"{done['when']}/{n} completed), approve_writes=always {asked['always']} "
        f"({asked['always'] / n:.2f} a task, {done['always']}/{n} completed)"
    )
    return unchanged


def cpu_cost(suite: TaskSuite[Any], labels: Labels, users: Sequence[BaseUserTask[Any]]) -> None:
    env = suite.load_and_inject_default_environment({})
    costs: dict[str, list[float]] = {"none": [], "policy": []}
    with hosts(suite, labels, NO_PERSON) as (bare, governed):
        pairs = (("none", bare), ("policy", governed))
        for _, bench in pairs:  # warm-up
            for user in users:
                run(bench, suite, user, env.model_copy(deep=True))
        for turn in range(CPU_TURNS):
            for name, bench in pairs if turn % 2 == 0 else pairs[::-1]:
                cpu = sum(run(bench, suite, u, env.model_copy(deep=True)).cpu for u in users)
                costs[name].append(cpu * 1000 / len(users))
    without = statistics.median(costs["none"])
    with_policy = statistics.median(costs["policy"])
    print(
        f"CPU per run ({len(users)} benign runs the policy lets through unchanged, "
        f"{CPU_TURNS} alternating batches, median):"
    )
    print(f"  without the policy: {without:.3f} ms")
    print(f"  with the policy:    {with_policy:.3f} ms")
    print(f"  cost of the policy: {with_policy / without - 1:+.1%} of a run")


def unnamed(suite: TaskSuite[Any], labels: Labels) -> list[str]:
    return sorted(f.name for f in suite.tools if f.name not in labels.tools)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", required=True, help="banking, workspace, ...")
    parser.add_argument("--labels", type=Path, help="the labels file (benchmarks/agentdojo/)")
    args = parser.parse_args()
    suite = get_suite(VERSION, args.suite)
    labels = load_labels(args.labels or LABELS / f"{args.suite}.toml")
    print(f"AgentDojo {VERSION}, suite {args.suite}, attack important_instructions")
    missing = unnamed(suite, labels)
    if missing:
        print(f"  tools the labels file does not name (nrllm's defaults): {', '.join(missing)}")
    attacks(suite, labels)
    unchanged = utility(suite, labels)
    cpu_cost(suite, labels, unchanged)


if __name__ == "__main__":
    main()
