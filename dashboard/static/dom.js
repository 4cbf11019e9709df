// Building the page. Every value from the daemon (a model's or a tool's words included) becomes
// a text node: nothing here ever parses data as markup, and an href is only ever a path this
// file builds for one of the dashboard's own pages.

export function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value === undefined || value === null) continue;
    if (name === 'class') node.className = value;
    else if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
    else if (name === 'href') throw new Error('use pageLink for links');
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// A link to one of the dashboard's pages: the path is built from fixed parts and encoded ids.
// Replace `node`'s children (null and false leave no trace, unlike replaceChildren's own).
export function fill(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

export function pageLink(parts, text, query) {
  const path = '/' + parts.map((part) => encodeURIComponent(String(part))).join('/');
  const a = document.createElement('a');
  a.setAttribute('href', query ? `${path}?${new URLSearchParams(query)}` : path);
  a.textContent = String(text);
  return a;
}

export function shortId(id) {
  return id ? String(id).slice(0, 12) : '';
}

export function age(epochS) {
  if (!epochS) return '';
  const s = Math.max(0, Date.now() / 1000 - epochS);
  if (s < 60) return `${Math.round(s)}s`;
  if (s < 3600) return `${Math.round(s / 60)}m`;
  if (s < 86400) return `${Math.round(s / 3600)}h`;
  return `${Math.round(s / 86400)}d`;
}

export function when(epochS) {
  return epochS ? new Date(epochS * 1000).toLocaleString() : '';
}

export function cost(usd) {
  return usd ? `$${Number(usd).toFixed(4)}` : '$0';
}

// The class a status or state is coloured by.
export function statusClass(task) {
  return `st st-${task.status || task.state}`;
}

export function table(headers, rows) {
  return el('table', {},
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows));
}

export function notice(text, kind) {
  return el('p', { class: kind === 'error' ? 'error' : 'muted', role: kind === 'error' ? 'alert' : null }, text);
}
