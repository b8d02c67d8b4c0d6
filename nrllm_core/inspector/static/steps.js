// The step inspector: one card per run step, with Result, Arguments and (when there are
// any) Artifacts tabs. Artifacts are attacker-influenceable: they only ever become text nodes.

import { asText, el, pretty } from "./dom.js";
import { tabSet } from "./tabs.js";

export function stepCard(given) {
  const step = given ?? {};
  const header = el(
    "div",
    { class: "step-head" },
    el("span", { class: `kind kind-${safeClass(step.kind)}`, text: asText(step.kind ?? "step") }),
    el("span", { class: "seq", text: `#${asText(step.sequence ?? "?")}` }),
    el("span", { class: "round", text: `round ${asText(step.round ?? "?")}` }),
    el("span", { class: "summary", text: summary(step) }),
  );
  const tabs = [
    { name: "Result", render: () => resultView(step) },
    { name: "Arguments", render: () => argumentsView(step) },
  ];
  if (Array.isArray(step.tool_artifacts) && step.tool_artifacts.length > 0) {
    tabs.push({ name: "Artifacts", render: () => artifacts(step.tool_artifacts) });
  }
  tabs.push({ name: "Step", render: () => el("pre", { class: "pre", text: pretty(step) }) });
  return el(
    "li",
    { class: "step", "data-kind": asText(step.kind ?? "") },
    header,
    tabSet(`Step ${asText(step.sequence ?? "")} details`, tabs),
  );
}

// Billed tokens, as text; a missing or odd count shows as 0, never as markup.
export function usageText(usage) {
  const given = usage && typeof usage === "object" ? usage : {};
  const count = (key) => (Number.isInteger(given[key]) && given[key] >= 0 ? given[key] : 0);
  return (
    `Tokens: prompt ${count("prompt_tokens")} (cached ${count("cached_tokens")}), ` +
    `completion ${count("completion_tokens")} (reasoning ${count("reasoning_tokens")})`
  );
}

function safeClass(kind) {
  return typeof kind === "string" && /^[a-z]+$/.test(kind) ? kind : "other";
}

// What the run's model had read when it was asked: the label's class, integrity and sources.
function labelText(label) {
  if (label === null || typeof label !== "object") return "";
  const sources = Array.isArray(label.untrusted_from) ? label.untrusted_from.map(asText) : [];
  const from = sources.length ? ` from ${sources.join(", ")}` : "";
  return `model has read ${asText(label.data_class ?? "?")} · ${asText(label.integrity ?? "?")}${from}`;
}

function summary(step) {
  if (step.kind === "tool") {
    const state = step.tool_is_error ? "error" : "ok";
    const kept = step.handle ? ` · kept as ${asText(step.handle)}` : "";
    return `${asText(step.tool_name ?? "tool")} (${state})${kept}`;
  }
  if (step.kind === "request") return labelText(step.label);
  if (step.kind === "llm" && Array.isArray(step.requested_tool_calls)) {
    return `asks for ${step.requested_tool_calls.map((c) => asText(c?.name)).join(", ")}`;
  }
  if (step.kind === "llm") {
    const cut = step.truncated === true ? " (truncated)" : "";
    const tokens = Number.isInteger(step.prompt_tokens) ? ` · ${usageText(step)}` : "";
    return `${asText(step.finish_reason ?? "")}${cut}${tokens}`;
  }
  if (step.kind === "approval") return `${asText(step.decision ?? "")} by ${asText(step.approver ?? "?")}`;
  if (step.kind === "gate") return `provider ${asText(step.provider ?? "none")}`;
  if (step.kind === "sampling") {
    const outcome = step.refused ? `refused: ${asText(step.refused)}` : "answered";
    return `${asText(step.tool_name ?? "tool")} asks ${asText(step.provider ?? "?")}: ${outcome}`;
  }
  if (step.kind === "elicitation") return `${asText(step.tool_name ?? "tool")} asks a person: ${asText(step.action ?? "")}`;
  if (step.kind === "start") return `${asText(step.run_kind ?? "run")} on ${asText(step.provider ?? "no provider")}`;
  if (step.kind === "suspension") return `waits for a person (turn ${asText(step.turn_digest ?? "").slice(0, 12)})`;
  if (step.kind === "finish") return `${asText(step.status ?? "")} (${asText(step.termination_reason ?? "")})`;
  if (step.content_redacted) return "content not kept";
  return "";
}

function resultView(step) {
  if (step.kind === "tool") {
    return el("pre", { class: "pre", text: typeof step.tool_result === "string" ? step.tool_result : "" });
  }
  if (typeof step.content === "string") return el("pre", { class: "pre", text: step.content });
  if (step.kind === "gate" && Array.isArray(step.decisions)) return decisionsTable(step.decisions);
  return el("p", { class: "muted", text: "No result on this step." });
}

function argumentsView(step) {
  if (step.kind === "tool" && step.tool_arguments !== undefined) {
    return el("pre", { class: "pre", text: pretty(step.tool_arguments) });
  }
  if (Array.isArray(step.requested_tool_calls)) {
    return el("pre", { class: "pre", text: pretty(step.requested_tool_calls) });
  }
  if (Array.isArray(step.messages_sent)) {
    return el("pre", { class: "pre", text: pretty(step.messages_sent) });
  }
  return el("p", { class: "muted", text: "No arguments on this step." });
}

function decisionsTable(decisions) {
  const columns = ["tool", "offered", "reason", "data_class", "zone", "ceiling"];
  return table(
    columns,
    decisions.map((d) => columns.map((c) => (d && d[c] !== undefined ? d[c] : ""))),
    "table",
  );
}

export function artifacts(list) {
  return el("div", { class: "artifacts" }, list.map(artifact));
}

function artifact(a) {
  const given = a?.label ?? "";
  const label = given === "" ? "Artifact" : asText(given);
  const data = a && typeof a.data === "object" && a.data !== null ? a.data : {};
  let body;
  if (a?.type === "table" && Array.isArray(data.columns) && Array.isArray(data.rows)) {
    body = table(data.columns, data.rows, "artifact-table");
  } else if (a?.type === "text") {
    body = el("pre", { class: "pre", text: typeof data.text === "string" ? data.text : "" });
  } else {
    // An unknown or masked shape is shown as data, never interpreted.
    body = el("pre", { class: "pre", text: a === null || a === undefined ? "" : pretty(a) });
  }
  return el("div", { class: "artifact" }, el("div", { class: "artifact-label", text: label }), body);
}

function table(columns, rows, className) {
  return el(
    "table",
    { class: className },
    el("thead", {}, el("tr", {}, columns.map((c) => el("th", { scope: "col", text: asText(c) })))),
    el(
      "tbody",
      {},
      rows.map((row) =>
        el("tr", {}, Array.isArray(row) ? row.map((cell) => el("td", { text: asText(cell) })) : []),
      ),
    ),
  );
}
