// The inspector page: the three views, their forms and lists. No markup is ever parsed.

import { asText, clear, el, uid } from "./dom.js";
import { loadRuns, startRuns, timeCell } from "./runs.js";
import { getJson, pendingList, showError, streamRun, untrustedList } from "./stream.js";

const $ = (id) => document.getElementById(id);

// -- navigation ---------------------------------------------------------------------------

const loaders = { runs: loadRuns, approvals: loadApprovals };

// The hash names the view, then its state: "#runs?status=failed" is the Runs view, filtered.
function show(hash) {
  const view = hash.split("?")[0];
  const name = ["playground", "runs", "approvals"].includes(view) ? view : "playground";
  for (const section of document.querySelectorAll(".view")) {
    section.hidden = section.id !== `view-${name}`;
  }
  for (const link of document.querySelectorAll("nav a")) {
    if (link.dataset.view === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  loaders[name]?.();
}

// -- playground ---------------------------------------------------------------------------

function options(select, names, { blank, chosen } = {}) {
  clear(select);
  if (blank) select.append(el("option", { value: "", text: blank }));
  for (const name of names) select.append(el("option", { value: name, text: name, selected: name === chosen }));
}

async function loadConfig() {
  try {
    const config = await getJson("api/config");
    options($("provider"), config.providers, { chosen: config.default_provider });
    options($("skill"), config.skills, { blank: "(no skill)" });
    options($("tool"), config.tools);
    $("who").textContent = `Acting as ${asText(config.actor)}; the audit keeps: ${asText(config.privacy_level)}`;
  } catch (error) {
    showError($("playground-output"), `The configuration could not be read: ${error.message}`);
  }
}

function mode() {
  return document.querySelector('input[name="mode"]:checked').value;
}

function syncMode() {
  const direct = mode() === "tool";
  $("prompt-fields").hidden = direct;
  $("tool-fields").hidden = !direct;
  $("skill").disabled = direct;
  $("max-rounds").disabled = direct;
}

async function submitRun(event) {
  event.preventDefault();
  const output = $("playground-output");
  const button = $("run-button");
  let url;
  let body;
  if (mode() === "tool") {
    let args;
    try {
      args = JSON.parse($("arguments").value || "{}");
    } catch {
      showError(output, "The arguments are not valid JSON.");
      return;
    }
    if (typeof args !== "object" || args === null || Array.isArray(args)) {
      showError(output, "The arguments must be a JSON object.");
      return;
    }
    url = "api/invoke";
    body = { tool: $("tool").value, arguments: args, provider: $("provider").value || null };
  } else {
    const prompt = $("prompt").value.trim();
    if (!prompt) {
      showError(output, "Type a prompt first.");
      return;
    }
    const rounds = $("max-rounds").value;
    url = "api/run";
    body = {
      prompt,
      provider: $("provider").value || null,
      skill: $("skill").value || null,
      max_rounds: rounds ? Number(rounds) : null,
    };
  }
  button.disabled = true;
  try {
    await streamRun(url, body, output, { running: $("running") });
  } finally {
    button.disabled = false;
  }
}

// -- approvals inbox ----------------------------------------------------------------------

async function loadApprovals() {
  const list = $("approvals-list");
  try {
    const data = await getJson("api/approvals");
    clear(list);
    if (data.approvals.length === 0) {
      list.append(el("p", { class: "muted", text: "No run is waiting for approval." }));
      return;
    }
    list.append(el("ul", { class: "inbox" }, data.approvals.map(inboxEntry)));
    if (data.more === true) {
      list.append(
        el("p", {
          class: "muted",
          text: `More runs wait than the ${data.approvals.length} newest shown here: decide these, or list them all with nrllm runs --status awaiting_approval.`,
        }),
      );
    }
  } catch (error) {
    showError(list, `The inbox could not be read: ${error.message}`);
  }
}

function inboxEntry(entry) {
  const run = entry.run;
  const heading = el("h3", { text: `Run ${asText(run.run_id)}` });
  const meta = el(
    "p",
    { class: "muted" },
    `provider ${asText(run.provider ?? "—")}, skill ${asText(run.skill ?? "—")}, started by ${asText(run.actor ?? "?")} `,
    el("span", { class: "started" }, timeCell(run.started_at)),
  );
  if (typeof entry.error === "string") {
    return el("li", { class: "entry" }, heading, meta, el("p", { class: "error", role: "alert", text: entry.error }));
  }
  const decide = (approve) => async () => {
    for (const button of document.querySelectorAll(".decide")) button.disabled = true;
    try {
      await streamRun(
        `api/approvals/${encodeURIComponent(asText(run.run_id))}`,
        { approve, turn_digest: entry.turn_digest },
        $("approval-output"),
        { running: $("approval-running") },
      );
    } finally {
      await loadApprovals();
    }
  };
  return el(
    "li",
    { class: "entry", "data-run": run.run_id },
    heading,
    meta,
    pendingList(entry.pending),
    untrustedList(entry.untrusted),
    el("p", { class: "expiry" }, "The turn expires ", el("span", { class: "expires" }, timeCell(entry.expires_at)), "; after that it can no longer be decided."),
    el("p", { class: "digest", text: `Turn digest: ${asText(entry.turn_digest)}` }),
    decisionRow(entry, decide),
  );
}

// Approve and Deny as the server allows them for the inspector's actor. A button the rule
// refuses is disabled with the rule's reason beside it; the server refuses it again anyway.
function decisionRow(entry, decide) {
  const row = el("div", { class: "row" });
  const reasons = [];
  for (const [approve, label, allowed, refused] of [
    [true, "Approve", entry.may_approve, entry.approve_refused],
    [false, "Deny", entry.may_deny, entry.deny_refused],
  ]) {
    // Only an explicit true enables a button: an entry without the field allows nothing.
    const may = allowed === true;
    const reason = may ? null : el("p", { id: uid("refused"), class: "refused", text: typeof refused === "string" ? `${label}: ${refused}` : `${label} is not allowed.` });
    row.append(
      el("button", {
        type: "button",
        class: `decide ${approve ? "approve" : "deny"}`,
        text: label,
        disabled: !may,
        "aria-describedby": reason?.id,
        onclick: decide(approve),
      }),
    );
    if (reason) reasons.push(reason);
  }
  return el("div", { class: "decision" }, row, reasons);
}

// -- start --------------------------------------------------------------------------------

function start() {
  $("run-form").addEventListener("submit", submitRun);
  for (const radio of document.querySelectorAll('input[name="mode"]')) radio.addEventListener("change", syncMode);
  startRuns();
  $("approvals-refresh").addEventListener("click", loadApprovals);
  window.addEventListener("hashchange", () => show(location.hash.slice(1)));
  syncMode();
  loadConfig();
  show(location.hash.slice(1));
}

start();
