// The Runs view: the filters and page in the address (#runs?status=failed&…), a page of runs,
// and one run's stored timeline with its totals, its waterfall and its audit chain's verdict.
// Every value from the server is text.

import { asText, clear, el, pretty } from "./dom.js";
import { stepCard } from "./steps.js";
import { getJson, showError } from "./stream.js";
import { markBroken, timeline } from "./timeline.js";

const $ = (id) => document.getElementById(id);

// The API's query keys, in the order the address spells them.
const FILTERS = ["status", "kind", "provider", "actor", "tool", "after", "before"];
const TIMES = new Set(["after", "before"]);

// -- the address ---------------------------------------------------------------------------

// The query of "#runs?…": the filters and the cursor of the page shown, as the API reads them.
export function runsQuery() {
  const hash = location.hash.slice(1);
  const mark = hash.indexOf("?");
  return new URLSearchParams(mark < 0 ? "" : hash.slice(mark + 1));
}

function go(params) {
  const query = params.toString();
  // A new address is a new history entry: Back returns to the page or filters before.
  location.hash = query ? `runs?${query}` : "runs";
}

// The form holds local times ("2026-03-01T10:00"); the address and the API hold the moment
// in UTC, so a shared link means the same runs wherever it is opened.
function toUtc(local) {
  const moment = new Date(local);
  return Number.isNaN(moment.getTime()) ? "" : moment.toISOString();
}

function toLocalInput(iso) {
  const moment = new Date(iso);
  if (Number.isNaN(moment.getTime())) return "";
  const pad = (n) => String(n).padStart(2, "0");
  return (
    `${moment.getFullYear()}-${pad(moment.getMonth() + 1)}-${pad(moment.getDate())}` +
    `T${pad(moment.getHours())}:${pad(moment.getMinutes())}`
  );
}

function fillForm(params) {
  for (const key of FILTERS) {
    const value = params.get(key) ?? "";
    $(`filter-${key}`).value = TIMES.has(key) ? toLocalInput(value) : value;
  }
}

function submitFilters(event) {
  event.preventDefault();
  const params = new URLSearchParams();
  for (const key of FILTERS) {
    const raw = $(`filter-${key}`).value.trim();
    const value = TIMES.has(key) && raw ? toUtc(raw) : raw;
    if (value) params.set(key, value);
  }
  // Other filters make another listing: it starts at its first page.
  go(params);
}

function clearFilters() {
  go(new URLSearchParams());
}

// -- times ---------------------------------------------------------------------------------

const UNITS = [
  ["year", 365 * 24 * 3600],
  ["month", 30 * 24 * 3600],
  ["week", 7 * 24 * 3600],
  ["day", 24 * 3600],
  ["hour", 3600],
  ["minute", 60],
];

// "3 minutes ago", in the viewer's language; under a minute, "just now".
export function relativeTime(moment, now = Date.now()) {
  const seconds = Math.round((moment.getTime() - now) / 1000);
  if (Math.abs(seconds) < 60) return "just now";
  const format = new Intl.RelativeTimeFormat(undefined, { numeric: "auto", style: "long" });
  for (const [unit, size] of UNITS) {
    if (Math.abs(seconds) >= size) return format.format(Math.trunc(seconds / size), unit);
  }
  return format.format(Math.trunc(seconds / 60), "minute");
}

// A stored time as <time>: relative, with the exact local time (and zone) on hover. A value
// that is not a time is shown as its text.
export function timeCell(value) {
  const moment = typeof value === "string" ? new Date(value) : null;
  if (moment === null || Number.isNaN(moment.getTime())) return asText(value ?? "");
  const exact = moment.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "long" });
  return el("time", { datetime: moment.toISOString(), title: exact, text: relativeTime(moment) });
}

// -- the listing ---------------------------------------------------------------------------

const COLUMNS = ["started_at", "run_id", "kind", "status", "provider", "actor", "skill", "steps"];

export async function loadRuns() {
  const list = $("runs-list");
  const params = runsQuery();
  fillForm(params);
  const query = params.toString();
  try {
    const data = await getJson(query ? `api/runs?${query}` : "api/runs");
    clear(list);
    const runs = Array.isArray(data.runs) ? data.runs : [];
    if (runs.length === 0) {
      const filtered = FILTERS.some((key) => params.has(key));
      list.append(el("p", { class: "muted", text: filtered ? "No stored run matches these filters." : "No runs are stored yet." }));
    } else {
      list.append(runsTable(runs));
    }
    list.append(pager(params, typeof data.next === "string" ? data.next : null));
  } catch (error) {
    showError(list, `The runs could not be read: ${error.message}`);
    // A refused cursor (edited, or from before a restart) leaves a way back to the first page.
    if (params.has("cursor")) list.append(pager(params, null));
  }
}

function runsTable(runs) {
  return el(
    "table",
    { class: "table runs" },
    el("thead", {}, el("tr", {}, COLUMNS.map((c) => el("th", { scope: "col", text: c.replace("_", " ") })))),
    el(
      "tbody",
      {},
      runs.map((run) =>
        el(
          "tr",
          {},
          COLUMNS.map((c) => {
            if (c === "run_id") {
              return el("td", {}, el("button", { type: "button", class: "link", text: run.run_id, onclick: () => loadRun(asText(run.run_id)) }));
            }
            if (c === "started_at") return el("td", {}, timeCell(run[c]));
            return el("td", { text: asText(run[c] ?? "") });
          }),
        ),
      ),
    ),
  );
}

function pager(params, next) {
  const first = new URLSearchParams(params);
  first.delete("cursor");
  const nav = el("nav", { class: "row pager", "aria-label": "Pages of runs" });
  if (params.has("cursor")) {
    nav.append(el("button", { type: "button", id: "runs-first", text: "First page", onclick: () => go(first) }));
  }
  if (next !== null) {
    const after = new URLSearchParams(params);
    after.set("cursor", next);
    nav.append(el("button", { type: "button", id: "runs-next", text: "Next page", onclick: () => go(after) }));
  }
  return nav;
}

// -- one run -------------------------------------------------------------------------------

export async function loadRun(runId) {
  const detail = $("run-detail");
  try {
    const data = await getJson(`api/runs/${encodeURIComponent(runId)}`);
    clear(detail);
    const steps = Array.isArray(data.steps) ? data.steps : [];
    const cards = steps.map(stepCard);
    const chart = timeline(steps, { open: (index) => openCard(cards, index), format: duration });
    const verdict = el("p", { class: "verdict", role: "status", text: "Checking the audit chain…" });
    detail.append(
      el("h3", { text: `Run ${asText(data.run.run_id)}` }),
      el("p", {
        class: "note audit",
        text: `Audit view: the persisted timeline, filtered at privacy level "${asText(data.privacy_level)}". Content the level does not keep is absent.`,
      }),
      verdict,
      totalsTable(data.totals),
      el(
        "figure",
        { class: "waterfall" },
        el("figcaption", {
          class: "muted",
          text:
            chart.getAttribute("data-layout") === "time"
              ? "Steps in order, each bar at its time from the run's first step, ending when the step was recorded and as long as it took, so calls run at once overlap. Choose a step to open it below."
              : "Steps in order, each bar as long as the step took. Some steps have no recorded time, so each starts where the one before ended. Choose a step to open it below.",
        }),
        chart,
      ),
      el("pre", { class: "pre", text: pretty(data.run) }),
      el("ol", { class: "steps", "aria-label": "Stored steps" }, cards),
    );
    detail.querySelector("h3").scrollIntoView({ block: "nearest" });
    // Its own request: the run shows while its chain is checked, and a check that fails
    // leaves the run's view as it is.
    loadVerdict(runId, verdict, chart);
  } catch (error) {
    showError(detail, `The run could not be read: ${error.message}`);
  }
}

// A bar of the waterfall opens its step: the card is marked, brought into view and its
// selected tab takes the focus, so the keyboard goes on from there.
function openCard(cards, index) {
  const card = cards[index];
  if (card === undefined) return;
  for (const other of cards) other.classList.toggle("chosen", other === card);
  card.scrollIntoView({ block: "nearest" });
  card.querySelector('[role="tab"][aria-selected="true"]')?.focus();
}

async function loadVerdict(runId, verdict, chart) {
  try {
    const check = await getJson(`api/runs/${encodeURIComponent(runId)}/verify`);
    const verified = check.verified === true;
    verdict.className = `verdict ${verified ? "verified" : "broken"}`;
    verdict.setAttribute("data-verified", verified ? "true" : "false");
    verdict.replaceChildren(el("strong", { text: "Audit chain: " }), asText(check.text ?? ""));
    if (typeof check.note === "string") verdict.append(el("span", { class: "muted", text: ` ${check.note}` }));
    if (!verified && check.broken && typeof check.broken === "object") markBroken(chart, check.broken.sequence);
  } catch (error) {
    verdict.className = "verdict error";
    verdict.textContent = `The audit chain could not be checked: ${error.message}`;
  }
}

function count(value) {
  return Number.isInteger(value) && value >= 0 ? value.toLocaleString() : "—";
}

export function duration(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 1000) return `${ms.toFixed(ms < 10 ? 1 : 0)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(2)} s`;
  const minutes = Math.floor(ms / 60_000);
  return `${minutes} min ${Math.round((ms % 60_000) / 1000)} s`;
}

const TOTALS = [
  ["Wall time", "wall_ms", duration],
  ["Model time", "model_ms", duration],
  ["Tool time", "tool_ms", duration],
  ["Tokens in", "prompt_tokens", count],
  ["Tokens out", "completion_tokens", count],
  ["Cached", "cached_tokens", count],
  ["Reasoning", "reasoning_tokens", count],
  ["Tool calls", "calls", count],
  ["Errors", "errors", count],
];

function totalsTable(given) {
  const totals = given && typeof given === "object" ? given : {};
  return el(
    "table",
    { class: "table totals", "aria-label": "Run totals" },
    el("tbody", {}, TOTALS.map(([label, key, shown]) => el("tr", { "data-total": key }, el("th", { scope: "row", text: label }), el("td", { text: shown(totals[key]) })))),
  );
}

// -- start ---------------------------------------------------------------------------------

export function startRuns() {
  $("runs-filters").addEventListener("submit", submitFilters);
  $("runs-clear").addEventListener("click", clearFilters);
  $("runs-refresh").addEventListener("click", loadRuns);
}
