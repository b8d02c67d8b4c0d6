// The live run stream: POST, read NDJSON line by line, render each event as it arrives.

import { append, asText, clear, el, pretty } from "./dom.js";
import { stepCard, usageText } from "./steps.js";

export async function postJson(url, body) {
  return fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/x-ndjson" },
    body: JSON.stringify(body),
  });
}

// A JSON answer of the API; a refusal throws with the server's message.
export async function getJson(url) {
  const response = await fetch(url, { headers: { Accept: "application/json" } });
  if (!response.ok) throw new Error(await readError(response));
  return response.json();
}

export function showError(container, message) {
  clear(container);
  container.append(el("div", { class: "error", role: "alert" }, el("p", { text: message })));
}

export async function readError(response) {
  try {
    const data = await response.json();
    if (data && typeof data.error === "string") return data.error;
  } catch {
    // Not JSON: fall through to the status line.
  }
  return `The server answered ${response.status} ${response.statusText}.`;
}

// Streams `url` into `container`; `onTerminal(event)` sees the terminal event (or a
// synthesised error). Resolves when the stream ends.
export async function streamRun(url, body, container, { onTerminal = () => {}, running } = {}) {
  clear(container);
  const view = runView(container);
  if (running) running.hidden = false;
  container.setAttribute("aria-busy", "true");
  let terminal = null;
  const finish = (event) => {
    terminal = event;
    view.terminal(event);
    onTerminal(event);
  };
  try {
    const response = await postJson(url, body);
    if (!response.ok || !response.body) {
      finish({ event: "error", error: await readError(response) });
      return;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      const lines = buffer.split("\n");
      buffer = lines.pop();
      for (const line of lines) {
        const event = parse(line);
        if (event) show(view, event, finish);
      }
    }
    const last = parse(buffer);
    if (last) show(view, last, finish);
    if (!terminal) finish({ event: "error", error: "The stream ended without an outcome." });
  } catch {
    if (!terminal) finish({ event: "error", error: "The connection to the inspector was lost." });
  } finally {
    if (running) running.hidden = true;
    container.removeAttribute("aria-busy");
  }
}

function show(view, event, finish) {
  if (event.event === "context") view.context(event);
  else if (event.event === "step") view.step(event.step);
  else if (event.event === "text" || event.event === "thinking") view.piece(event.event, event.text);
  else if (event.event === "restart") view.restart();
  else if (event.event === "progress") view.progress(event);
  else if (event.event === "question") view.question(event);
  else if (event.event === "question_closed") view.questionClosed(event);
  else finish(event);
}

function parse(line) {
  const text = line.trim();
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return null;
  }
}

function runView(container) {
  const label = el("p", {
    class: "note live",
    text: "Live view: each step and the model's text as they happen, unfiltered, from memory. The Runs page shows what the audit kept.",
  });
  const context = el("dl", { class: "context", hidden: true });
  const steps = el("ol", { class: "steps", "aria-label": "Run steps" });
  const outcome = el("div", { class: "outcome", "aria-live": "polite" });
  container.append(label, context, steps, outcome);
  // The model's text as it streams, in the timeline where its step will stand.
  let answer = null;
  // Each running call's progress, in the timeline where its step will stand.
  const running = new Map();
  // Each tool's question to the person, open until the run says it is closed.
  const questions = new Map();
  const answering = () => {
    if (!answer) {
      answer = answerView();
      steps.append(answer.node);
    }
    return answer;
  };
  return {
    context(event) {
      context.hidden = false;
      const offered = Array.isArray(event.offered) ? event.offered.map(asText).join(", ") : "";
      for (const [term, value] of [
        ["Provider", event.provider ?? (event.direct ? "none: a direct call" : "none")],
        ["Zone", event.zone ?? "—"],
        ["Ceiling", event.ceiling ?? "—"],
        ["Skill", event.skill ?? "—"],
        ["Offered tools", offered || "none"],
      ]) {
        context.append(el("dt", { text: term }), el("dd", { text: asText(value) }));
      }
    },
    step(step) {
      const call = step?.kind === "tool" && typeof step.tool_call_id === "string" ? running.get(step.tool_call_id) : undefined;
      if (call) {
        running.delete(step.tool_call_id);
        call.node.replaceWith(stepCard(step));
      } else if (answer && step?.kind === "llm") {
        answer.node.replaceWith(stepCard(step));
        answer = null;
      } else {
        steps.append(stepCard(step));
      }
    },
    piece(kind, text) {
      answering().add(kind, text);
    },
    restart() {
      answering().restart();
    },
    progress(event) {
      if (typeof event.call_id !== "string") return;
      let call = running.get(event.call_id);
      if (!call) {
        call = progressView(event.tool);
        running.set(event.call_id, call);
        steps.append(call.node);
      }
      call.update(event);
    },
    question(event) {
      if (typeof event.question_id !== "string" || questions.has(event.question_id)) return;
      const panel = questionView(event);
      questions.set(event.question_id, panel);
      steps.append(panel.node);
    },
    questionClosed(event) {
      questions.get(event.question_id)?.closed(event.action);
      questions.delete(event.question_id);
    },
    terminal(event) {
      for (const panel of questions.values()) panel.closed("over");
      questions.clear();
      answer?.stopped();
      answer = null;
      for (const call of running.values()) call.stopped();
      running.clear();
      clear(outcome);
      outcome.append(outcomeView(event));
    },
  };
}

function answerView() {
  const status = el("span", { class: "summary", text: "answering…" });
  const broke = el("p", { class: "muted", hidden: true, text: "The stream broke: the model is asked again, and what it said before is void." });
  const thinking = el("pre", { class: "pre thinking", "aria-label": "Thinking", hidden: true });
  const text = el("pre", { class: "pre answer-text" });
  const node = el(
    "li",
    { class: "step answer", "data-kind": "answer" },
    el("div", { class: "step-head" }, el("span", { class: "kind", text: "model" }), status),
    broke,
    thinking,
    text,
  );
  return {
    node,
    add(kind, piece) {
      const into = kind === "thinking" ? thinking : text;
      into.hidden = false;
      append(into, piece ?? "");
    },
    restart() {
      clear(thinking);
      clear(text);
      thinking.hidden = true;
      broke.hidden = false;
    },
    stopped() {
      status.textContent = "the run ended before the model's step was recorded";
    },
  };
}

// A running call's progress: its tool, how far it got and its message, all as text (the
// message is the tool's, or an MCP server's).
function progressView(tool) {
  const status = el("span", { class: "summary", text: `${asText(tool ?? "tool")} (running)` });
  const bar = el("progress", { "aria-label": "Progress" });
  const count = el("span", { class: "muted progress-count" });
  const message = el("p", { class: "progress-message" });
  const node = el(
    "li",
    { class: "step progress", "data-kind": "progress" },
    el("div", { class: "step-head" }, el("span", { class: "kind", text: "tool" }), status),
    el("div", { class: "row" }, bar, count),
    message,
  );
  return {
    node,
    update(event) {
      const done = typeof event.progress === "number" ? event.progress : 0;
      const total = typeof event.total === "number" && event.total > 0 ? event.total : null;
      if (total === null) {
        // A progress without a total only counts up: the bar stays indeterminate.
        bar.removeAttribute("value");
        count.textContent = asText(done);
      } else {
        bar.max = total;
        bar.value = Math.min(done, total);
        count.textContent = `${asText(done)} / ${asText(total)}`;
      }
      message.textContent = typeof event.message === "string" ? event.message : "";
    },
    stopped() {
      status.textContent = `${asText(tool ?? "tool")} (the run ended before its step was recorded)`;
    },
  };
}

// A tool's question to the person: its message and field names are the tool's (an MCP
// server's) text, shown as text. The answer goes back through the guarded POST.
function questionView(event) {
  const id = event.question_id;
  const fields = Array.isArray(event.fields) ? event.fields : [];
  const status = el("p", { class: "muted question-status", role: "status" });
  const inputs = fields.map((field) => fieldInput(field));
  const buttons = [
    el("button", { type: "submit", text: "Answer" }),
    el("button", { type: "button", text: "Decline", onclick: () => send({ action: "decline" }) }),
    el("button", { type: "button", text: "Cancel", onclick: () => send({ action: "cancel" }) }),
  ];
  const form = el(
    "form",
    { class: "question-form", novalidate: true, "aria-label": "Your answer to the tool's question" },
    inputs.map((input) => input.node),
    el("div", { class: "row" }, buttons),
  );
  const node = el(
    "li",
    // A list item of the steps (a role here would take it out of the list); its form is named.
    { class: "step question", "data-kind": "question" },
    el("div", { class: "step-head" }, el("span", { class: "kind", text: "question" }), el("span", { class: "summary", text: `${asText(event.tool ?? "tool")} asks you` })),
    el("pre", { class: "pre question-message", text: typeof event.message === "string" ? event.message : "" }),
    form,
    status,
  );
  let open = true;
  async function send(body) {
    if (!open) return;
    for (const button of buttons) button.disabled = true;
    try {
      const response = await postJson(`api/questions/${encodeURIComponent(id)}`, body);
      if (!response.ok) status.textContent = await readError(response);
    } catch {
      status.textContent = "The answer could not be sent.";
    } finally {
      if (open) for (const button of buttons) button.disabled = false;
    }
  }
  form.addEventListener("submit", (submitted) => {
    submitted.preventDefault();
    const content = {};
    for (const input of inputs) {
      const value = input.value();
      if (value !== undefined) content[input.name] = value;
    }
    send({ action: "accept", content });
  });
  return {
    node,
    closed(action) {
      open = false;
      form.hidden = true;
      const said = { accept: "Answered.", decline: "Declined.", cancel: "Cancelled (no answer in time, or cancelled)." };
      status.textContent = said[action] ?? "The question is over.";
    },
  };
}

function fieldInput(field) {
  const name = typeof field?.name === "string" ? field.name : "";
  const label = typeof field?.title === "string" && field.title ? field.title : name;
  const hint = typeof field?.description === "string" ? field.description : "";
  let control;
  let value;
  if (Array.isArray(field?.enum)) {
    control = el("select", {}, field.enum.map((choice) => el("option", { value: asText(choice), text: asText(choice) })));
    value = () => control.value;
  } else if (field?.type === "boolean") {
    control = el("input", { type: "checkbox" });
    value = () => control.checked;
  } else if (field?.type === "integer" || field?.type === "number") {
    control = el("input", { type: "number", step: field.type === "integer" ? "1" : "any" });
    value = () => (control.value === "" ? undefined : Number(control.value));
  } else {
    control = el("input", { type: "text" });
    value = () => (control.value === "" && !field?.required ? undefined : control.value);
  }
  const node = el("label", { class: "question-field" }, el("span", { text: label }), control, hint ? el("span", { class: "hint", text: hint }) : false);
  return { name, node, value };
}

function outcomeView(event) {
  if (event.event === "done") {
    return el(
      "div",
      { class: "done", "data-outcome": "done" },
      el("h3", { text: "Done" }),
      event.truncated === true
        ? el("p", { class: "truncated", text: "Truncated: the answer stopped at its token limit." })
        : false,
      el("pre", { class: "pre", text: typeof event.final_content === "string" ? event.final_content : "" }),
      el("p", { class: "usage muted", text: usageText(event.usage) }),
    );
  }
  if (event.event === "awaiting_approval") {
    return el(
      "div",
      { class: "waiting", "data-outcome": "awaiting_approval" },
      el("h3", { text: "Awaiting approval" }),
      el("p", {}, `Run ${asText(event.run_id)} waits for a decision. `, el("a", { href: "#approvals", text: "Open the approvals inbox" }), "."),
      pendingList(event.pending),
      el("p", { class: "digest", text: `Turn digest: ${asText(event.turn_digest ?? "")}` }),
    );
  }
  return el(
    "div",
    { class: "error", role: "alert", "data-outcome": "error" },
    el("h3", { text: "Error" }),
    el("p", { text: typeof event.error === "string" ? event.error : "The run failed." }),
  );
}

// The untrusted results the model had read before the turn: what could have steered it.
export function untrustedList(untrusted) {
  const items = Array.isArray(untrusted) ? untrusted : [];
  if (items.length === 0) return el("p", { class: "muted", text: "The model had read no untrusted text." });
  return el(
    "div",
    { class: "untrusted" },
    el("p", { text: "Untrusted text the model had read before this turn:" }),
    el(
      "ul",
      {},
      items.map((source) =>
        el(
          "li",
          {},
          el("strong", { text: asText(source?.tool ?? "?") }),
          el("span", { class: "muted", text: ` (${asText(source?.call_id ?? "")})` }),
          typeof source?.excerpt === "string" ? el("q", { text: source.excerpt }) : null,
        ),
      ),
    ),
  );
}

export function pendingList(pending) {
  const items = Array.isArray(pending) ? pending : [];
  return el(
    "ul",
    { class: "pending" },
    items.map((call) =>
      el(
        "li",
        {},
        el("strong", { text: asText(call?.name ?? "") }),
        el("span", { class: "muted", text: call?.requires_approval ? " needs approval" : " runs with the turn" }),
        el("pre", { class: "pre", text: pretty(call?.arguments ?? {}) }),
        previewBlock(call),
      ),
    ),
  );
}

// A diff's lines: the mark a reader scans for, and the words a screen reader says instead.
const CHANGES = {
  same: { tag: "span", mark: "  ", label: null },
  removed: { tag: "del", mark: "- ", label: "removed" },
  added: { tag: "ins", mark: "+ ", label: "added" },
};

// A change the page does not know (or not a string: hasOwn would convert it) is shown as
// unchanged text, never dropped.
function changeOf(line) {
  const given = line?.change;
  return typeof given === "string" && Object.hasOwn(CHANGES, given) ? given : "same";
}

// The preview as the server sent it: an update the server found before/after lines in as a
// diff (it compared them, the page only marks them), anything else as its lines.
function previewBlock(call) {
  const diff = call?.preview_diff;
  if (diff && typeof diff === "object" && Array.isArray(diff.lines)) {
    const heading = Array.isArray(diff.heading) ? diff.heading.map(asText) : [];
    return el(
      "div",
      { class: "preview diff" },
      heading.length > 0 ? el("p", { class: "diff-heading", text: heading.join("\n") }) : null,
      el(
        "pre",
        { class: "pre", "aria-label": "Before and after" },
        diff.lines.map((line) => {
          const kind = changeOf(line);
          const change = CHANGES[kind];
          return el(
            change.tag,
            { class: `diff-line diff-${kind}`, "data-change": kind, title: change.label },
            el("span", { class: "diff-mark", "aria-hidden": "true", text: change.mark }),
            asText(line?.text ?? ""),
          );
        }),
      ),
    );
  }
  if (Array.isArray(call?.preview) && call.preview.length > 0) {
    return el("pre", { class: "pre preview", text: call.preview.map(asText).join("\n") });
  }
  return el("p", { class: "muted", text: call?.preview_failed ? "The preview failed." : "No preview." });
}
