// An accessible tab set: tablist/tab/tabpanel roles, roving tabindex, arrow keys, Home and End.

import { el, uid } from "./dom.js";

// tabs: [{ name, render: () => Node }]; the first tab is selected.
export function tabSet(label, tabs) {
  const base = uid("tabs");
  const list = el("div", { role: "tablist", "aria-label": label, class: "tablist" });
  const panels = [];
  const buttons = tabs.map((tab, index) => {
    const tabId = `${base}-tab-${index}`;
    const panelId = `${base}-panel-${index}`;
    const panel = el(
      "div",
      { role: "tabpanel", id: panelId, "aria-labelledby": tabId, tabindex: "0", class: "tabpanel" },
      tab.render(),
    );
    panels.push(panel);
    return el("button", {
      type: "button",
      role: "tab",
      id: tabId,
      "aria-controls": panelId,
      class: "tab",
      "data-tab": tab.name,
      text: tab.name,
    });
  });

  function select(index, focus) {
    buttons.forEach((button, i) => {
      const chosen = i === index;
      button.setAttribute("aria-selected", chosen ? "true" : "false");
      button.tabIndex = chosen ? 0 : -1;
      panels[i].hidden = !chosen;
    });
    if (focus) buttons[index].focus();
  }

  buttons.forEach((button, index) => {
    button.addEventListener("click", () => select(index, false));
    button.addEventListener("keydown", (event) => {
      const last = buttons.length - 1;
      const next = {
        ArrowRight: index === last ? 0 : index + 1,
        ArrowLeft: index === 0 ? last : index - 1,
        Home: 0,
        End: last,
      }[event.key];
      if (next === undefined) return;
      event.preventDefault();
      select(next, true);
    });
    list.append(button);
  });
  select(0, false);
  return el("div", { class: "tabs" }, list, panels);
}
