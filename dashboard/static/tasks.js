// The tasks page: the caller's tasks (an admin's: everyone's), newest first, filtered by state,
// trigger or schedule, a page at a time; the first page refreshes itself.
import { get } from './api.js';
import { age, cost, el, notice, pageLink, shortId, statusClass, table } from './dom.js';

const REFRESH_MS = 2000;
const STATES = ['', 'queued', 'starting', 'running', 'terminal'];

export function tasksPage(main) {
  const query = new URLSearchParams(location.search);
  const filters = {
    state: query.get('state') || '',
    trigger: query.get('trigger') || '',
    schedule: query.get('schedule') || '',
  };
  const pages = [];  // the `before` cursor of each page shown so far ('' = the newest)
  let before = '';
  let next = null;
  const list = el('div', { id: 'task-list' });
  const older = el('button', { type: 'button', id: 'older' }, 'Older');
  const newer = el('button', { type: 'button', id: 'newer' }, 'Newer');

  const stateSelect = el('select', { name: 'state', id: 'filter-state' },
    STATES.map((s) => el('option', { value: s }, s || 'any state')));
  stateSelect.value = filters.state;
  const triggerInput = el('input', { name: 'trigger', placeholder: 'trigger', value: filters.trigger });
  const scheduleInput = el('input', { name: 'schedule', placeholder: 'schedule id', value: filters.schedule });
  const form = el('form', { class: 'filters', id: 'filters' },
    el('label', {}, 'State ', stateSelect), ' ',
    el('label', {}, 'Trigger ', triggerInput), ' ',
    el('label', {}, 'Schedule ', scheduleInput), ' ',
    el('button', { type: 'submit' }, 'Filter'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    filters.state = stateSelect.value;
    filters.trigger = triggerInput.value.trim();
    filters.schedule = scheduleInput.value.trim();
    const shown = Object.fromEntries(Object.entries(filters).filter(([, v]) => v));
    history.replaceState(null, '', Object.keys(shown).length ? `/?${new URLSearchParams(shown)}` : '/');
    pages.length = 0;
    before = '';
    load();
  });

  async function load() {
    const params = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
    if (before) params.set('before', before);
    try {
      const page = await get(`/api/tasks?${params}`);
      next = page.before;
      list.replaceChildren(render(page.tasks));
    } catch (error) {
      list.replaceChildren(notice(error.message, 'error'));
    }
    older.disabled = !next;
    newer.disabled = pages.length === 0;
  }

  older.addEventListener('click', () => { pages.push(before); before = next; load(); });
  newer.addEventListener('click', () => { before = pages.pop() || ''; load(); });
  main.replaceChildren(el('h1', {}, 'Tasks'), form, list, el('p', { class: 'pager' }, newer, ' ', older));
  load();
  setInterval(() => { if (!before && !document.hidden) load(); }, REFRESH_MS);
}

function render(tasks) {
  if (!tasks.length) return notice('No tasks.');
  const rows = tasks.map((task) => el('tr', { 'data-task': task.task_id },
    el('td', { class: 'mono' }, pageLink(['tasks', task.task_id], shortId(task.task_id))),
    el('td', {}, el('span', { class: statusClass(task) }, task.status || task.state)),
    el('td', {}, age(task.created_at)),
    el('td', {}, task.model || ''),
    el('td', {}, task.trigger || (task.schedule_id ? `schedule ${shortId(task.schedule_id)}` : '')),
    el('td', { class: 'num' }, task.usage.steps),
    el('td', { class: 'num' }, task.usage.tokens_in + task.usage.tokens_out),
    el('td', { class: 'num' }, cost(task.usage.cost_usd)),
    el('td', { class: 'instruction' }, task.instruction)));
  return table(['task', 'state', 'age', 'model', 'from', 'steps', 'tokens', 'cost', 'instruction'], rows);
}
