// Building elements. Every string becomes a text node: nothing here parses markup.

export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = asText(value);
    else if (key === "hidden") node.hidden = Boolean(value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : asText(value));
  }
  append(node, ...children);
  return node;
}

export function append(node, ...children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(asText(child)));
  }
  return node;
}

export function clear(node) {
  node.replaceChildren();
}

// Server data as text: a string as it is, anything else as its JSON. String() and template
// strings are never used on server data: an object such as {"toString": 1} makes them throw,
// and one throw would stop the stream or the view that was rendering.
export function asText(value) {
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value) ?? "";
  } catch {
    return "(a value that cannot be shown)";
  }
}

export function pretty(value) {
  try {
    return JSON.stringify(value, null, 2) ?? "";
  } catch {
    return asText(value);
  }
}

let counter = 0;

export function uid(prefix) {
  counter += 1;
  return `${prefix}-${counter}`;
}
