// A stored run as a waterfall: one SVG row per step, its bar as long as the step took.
//
// A stored step keeps its duration and recorded_at, when the store wrote it (about when it
// ended), so a bar ends at its step's offset from the run's first step and starts duration_ms
// before that (not before 0): calls a turn ran at once overlap. When any step has no time,
// each bar starts where the one before it ended: the order and how long each took, not clock
// times.
// Every string from the server becomes a text node (textContent); nothing here parses markup.

import { asText } from "./dom.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 760;
const LABEL = 230; // the column of the rows' names
const TIME = 90; // room right of the longest bar for its duration
const ROW = 24;
const BAR = 14;
const TOP = 20; // the axis line above the first row
const MIN_BAR = 2; // a step of 0 ms still shows
const NAME_CHARS = 30; // a longer name is cut in the row; its title holds it whole

function svg(tag, attributes = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, asText(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function kindClass(kind) {
  return typeof kind === "string" && /^[a-z]+$/.test(kind) ? kind : "other";
}

function milliseconds(step) {
  const ms = step.duration_ms;
  return typeof ms === "number" && Number.isFinite(ms) && ms > 0 ? ms : 0;
}

// How a step ended, as the bar's class: "error" (a tool that failed or timed out, a failed
// run), "refused" (a call that never ran, a denied or unanswered approval, a refused sampling
// request, a declined or cancelled question), else "ok".
export function stepOutcome(step) {
  if (step.kind === "tool") {
    if (step.tool_outcome === "refused") return "refused";
    if (step.tool_outcome === "error" || step.tool_outcome === "timeout" || step.tool_is_error === true) return "error";
    return "ok";
  }
  if (step.kind === "approval" && typeof step.decision === "string" && step.decision !== "approved") return "refused";
  if (step.kind === "sampling" && step.refused) return "refused";
  if (step.kind === "elicitation" && (step.action === "decline" || step.action === "cancel")) return "refused";
  if (step.kind === "finish" && step.status === "failed") return "error";
  return "ok";
}

// What the row is called: its kind, and the tool it concerns when it names one.
function rowName(step) {
  const kind = asText(step.kind ?? "step");
  const tool = step.tool_name === undefined || step.tool_name === null ? "" : ` ${asText(step.tool_name)}`;
  return `#${asText(step.sequence ?? "?")} ${kind}${tool}`;
}

function cut(text) {
  return text.length > NAME_CHARS ? `${text.slice(0, NAME_CHARS - 1)}…` : text;
}

// When the step was written, in ms since the epoch, or null.
function recordedAt(step) {
  const at = step?.recorded_at;
  if (typeof at !== "string") return null;
  const ms = Date.parse(at);
  return Number.isFinite(ms) ? ms : null;
}

// Where each bar starts and how long it is, in ms from the run's first step: by the steps'
// times when every step has one, else one after another by sequence.
export function layout(steps) {
  const ends = steps.map(recordedAt);
  if (steps.length > 0 && ends.every((end) => end !== null)) {
    const origin = ends[0];
    const spans = steps.map((step, index) => {
      const end = Math.max(0, ends[index] - origin);
      const start = Math.max(0, end - milliseconds(step ?? {}));
      return { start, length: end - start };
    });
    return { timed: true, spans, total: Math.max(0, ...spans.map((span) => span.start + span.length)) };
  }
  let elapsed = 0;
  const spans = steps.map((step) => {
    const length = milliseconds(step ?? {});
    const span = { start: elapsed, length };
    elapsed += length;
    return span;
  });
  return { timed: false, spans, total: elapsed };
}

// steps: the run's stored steps, in sequence order. open(index) shows the step's card.
// format(ms) writes a duration. Answers an <svg> with one focusable row per step; its
// data-layout says "time" (bars at their steps' times) or "sequence" (one after another).
export function timeline(steps, { open, format }) {
  const { timed, spans, total } = layout(steps);
  const span = WIDTH - LABEL - TIME;
  const height = TOP + steps.length * ROW + 4;
  const chart = svg("svg", {
    class: "timeline",
    width: WIDTH,
    height,
    viewBox: `0 0 ${WIDTH} ${height}`,
    role: "group",
    "aria-label": "Timeline of the run's steps, in order, each as long as it took",
    "data-layout": timed ? "time" : "sequence",
  });
  chart.append(
    svg("text", { class: "tl-axis", x: LABEL, y: 12 }, "0"),
    svg("text", { class: "tl-axis", x: LABEL + span, y: 12, "text-anchor": "end" }, format(total)),
    svg("line", { class: "tl-axis-line", x1: LABEL, y1: TOP - 4, x2: LABEL + span, y2: TOP - 4 }),
  );
  const rows = [];
  steps.forEach((given, index) => {
    const step = given ?? {};
    const ms = milliseconds(step);
    const outcome = stepOutcome(step);
    const kind = kindClass(step.kind);
    const name = rowName(step);
    const y = TOP + index * ROW;
    const { start, length } = spans[index];
    const x = LABEL + (total > 0 ? (start / total) * span : 0);
    const width = Math.max(MIN_BAR, total > 0 ? (length / total) * span : 0);
    const state = outcome === "ok" ? "" : ` (${outcome})`;
    const title = `${name}${state}: ${format(ms)}`;
    const shown = cut(name);
    const whole = shown === name ? "" : `, whole name ${name}`;
    const row = svg("g", {
      class: "tl-row",
      role: "button",
      tabindex: "0",
      // The name starts with the row's visible text, as a voice command would say it.
      "aria-label": `${shown} ${format(ms)}${state}${whole}. Open its step.`,
      "data-sequence": asText(step.sequence ?? ""),
      "data-kind": kind,
      "data-outcome": outcome,
    });
    row.append(
      svg("title", {}, title),
      svg("rect", { class: "tl-hit", x: 0, y, width: WIDTH, height: ROW - 2, rx: 3 }),
      svg("rect", {
        class: `tl-bar tl-kind-${kind} tl-${outcome}`,
        x,
        y: y + (ROW - 2 - BAR) / 2,
        width,
        height: BAR,
        rx: 2,
      }),
    );
    // The name and the duration in one <text>, a space apart, so the row's visible text
    // reads "#4 llm 400 ms" (as its accessible name begins), each part at its own place.
    const label = svg("text", { y: y + ROW / 2 + 3 });
    label.append(
      svg("tspan", { class: "tl-name", x: 6 }, shown),
      " ",
      svg("tspan", { class: "tl-time", x: x + width + 4 }, format(ms)),
    );
    row.append(label);
    row.addEventListener("click", () => open(index));
    row.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        // Space would scroll the page too.
        event.preventDefault();
        open(index);
      } else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        event.preventDefault();
        rows[index + (event.key === "ArrowDown" ? 1 : -1)]?.focus();
      }
    });
    rows.push(row);
    chart.append(row);
  });
  return chart;
}

// Marks the row of the step where the audit chain breaks, when the timeline has one.
export function markBroken(chart, sequence) {
  for (const row of chart.querySelectorAll(".tl-row")) {
    if (row.getAttribute("data-sequence") === asText(sequence)) row.classList.add("tl-broken");
  }
}
