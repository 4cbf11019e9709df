// The timeline: one row per node, a bar per model call, tool call or wait, placed on a shared
// time axis from the task's first span to its last (or now, while one is still open).
import { el } from './dom.js';

export function drawTimeline(spans, task) {
  if (!spans.length) return el('p', { class: 'muted' }, 'Nothing yet.');
  const now = task.state === 'terminal' && task.ended_at ? task.ended_at : Date.now() / 1000;
  const start = Math.min(...spans.map((s) => s.start));
  const end = Math.max(...spans.map((s) => (s.end === null ? now : s.end)));
  const width = Math.max(end - start, 0.001);
  const rows = new Map();
  for (const span of spans) {
    if (!rows.has(span.handle)) rows.set(span.handle, []);
    rows.get(span.handle).push(span);
  }
  const handles = [...rows.keys()].sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  return el('div', { class: 'timeline' },
    el('p', { class: 'legend' }, ['model', 'tool', 'approval', 'throttle', 'budget'].map(
      (kind) => el('span', { class: `bar-key kind-${kind}` }, kind))),
    handles.map((handle) => el('div', { class: 'lane', 'data-handle': handle },
      el('span', { class: 'lane-name' }, handle),
      el('div', { class: 'track' }, rows.get(handle).map((span) => bar(span, start, width, now))))));
}

function bar(span, start, width, now) {
  const stop = span.end === null ? now : span.end;
  const seconds = Math.max(0, stop - span.start);
  const node = el('span', {
    class: `bar kind-${span.kind}${span.end === null ? ' open' : ''}`,
    title: `${span.label} · ${seconds.toFixed(2)} s${span.outcome ? ` · ${span.outcome}` : ''}`,
    'data-kind': span.kind,
  }, span.label);
  // CSSOM properties, not a style attribute: the Content-Security-Policy allows these.
  node.style.left = `${((span.start - start) / width) * 100}%`;
  node.style.width = `max(3px, ${(seconds / width) * 100}%)`;
  return node;
}
