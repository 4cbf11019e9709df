// The operator's pages: schedules and triggers (state, last fires or deliveries, failures; pause
// and resume) and the daemon (status, load, the limits in force).
import { get, post } from './api.js';
import { age, el, notice, pageLink, shortId, table, when } from './dom.js';

const REFRESH_MS = 3000;

function refreshing(main, title, path, render) {
  const body = el('div', { id: 'listing' });
  const message = el('p', { id: 'switch-message', class: 'muted', 'aria-live': 'polite' });
  async function load() {
    try {
      body.replaceChildren(render(await get(path), switcher));
    } catch (error) {
      body.replaceChildren(notice(error.message, 'error'));
    }
  }
  async function switcher(url) {
    try {
      await post(url, {});
      message.textContent = '';
    } catch (error) {
      message.textContent = error.message;
    }
    load();
  }
  main.replaceChildren(el('h1', {}, title), message, body);
  load();
  setInterval(() => { if (!document.hidden) load(); }, REFRESH_MS);
}

function toggle(paused, url, act) {
  const action = paused ? 'resume' : 'pause';
  const button = el('button', { type: 'button', class: action }, paused ? 'Resume' : 'Pause');
  button.addEventListener('click', () => act(`${url}/${action}`));
  return button;
}

export function schedulesPage(main) {
  refreshing(main, 'Schedules', '/api/schedules', (schedules, act) => {
    if (!schedules.length) return notice('No schedules.');
    return table(['schedule', 'when', 'state', 'next fire', 'runs', 'failures', 'last', 'instruction', ''],
      schedules.map((s) => el('tr', { 'data-schedule': s.schedule_id },
        el('td', { class: 'mono' }, s.name || shortId(s.schedule_id)),
        el('td', {}, s.trigger.kind === 'cron' ? `cron ${s.trigger.cron}${s.trigger.tz ? ` ${s.trigger.tz}` : ''}`
          : s.trigger.kind === 'interval' ? `every ${s.trigger.every_s} s` : `loop +${s.trigger.interval_s} s`),
        el('td', {}, s.state, s.note ? el('div', { class: 'muted' }, s.note) : null),
        el('td', {}, when(s.next_fire_at)),
        el('td', { class: 'num' }, s.runs, s.skipped ? ` (${s.skipped} skipped)` : ''),
        el('td', { class: 'num' }, s.failures),
        el('td', {}, s.last_task_id ? pageLink(['tasks', s.last_task_id], shortId(s.last_task_id)) : '',
          s.last_status ? ` ${s.last_status}` : '', s.last_fire_at ? ` ${age(s.last_fire_at)} ago` : '',
          s.last_error ? el('div', { class: 'error' }, s.last_error) : null,
          ' ', pageLink([''], 'fires', { schedule: s.schedule_id })),
        el('td', { class: 'instruction' }, s.instruction),
        el('td', {}, s.state === 'ended' ? '' : toggle(s.state === 'paused',
          `/api/schedules/${encodeURIComponent(s.schedule_id)}`, act)))));
  });
}

export function triggersPage(main) {
  refreshing(main, 'Triggers', '/api/triggers', (triggers, act) => {
    if (!triggers.length) return notice('No triggers are configured.');
    return table(['trigger', 'watches', 'state', 'deliveries', 'tasks', 'last fired', 'last error', ''],
      triggers.map((t) => el('tr', { 'data-trigger': t.name },
        el('td', {}, pageLink([''], t.name, { trigger: t.name })),
        el('td', {}, `${t.server}: ${t.uri || t.glob || ''}`, el('div', { class: 'muted' }, `${t.route}, ${t.subscribed} subscribed`)),
        el('td', {}, t.state),
        el('td', { class: 'num' }, t.deliveries, t.dropped ? ` (${t.dropped} dropped)` : ''),
        el('td', { class: 'num' }, `${t.tasks_started} (${t.inflight} running, ${t.waiting} waiting)`),
        el('td', {}, when(t.last_fired_at)),
        el('td', { class: 'error' }, t.last_error || ''),
        el('td', {}, toggle(t.state === 'paused', `/api/triggers/${encodeURIComponent(t.name)}`, act)))));
  });
}

export function daemonPage(main) {
  refreshing(main, 'Daemon', '/api/daemon', (s) => {
    const rows = [
      ['pid', s.pid], ['version', s.version], ['up', `${Math.round(s.uptime_s)} s`],
      ['draining', s.draining ? 'yes' : 'no'], ['journal', s.journal_ok ? 'ok' : 'failing'],
      ['degraded', s.degraded.join(', ') || 'no'],
      ['counted', s.scope === 'daemon' ? 'every user\'s tasks' : 'your tasks only'],
      ['queued', s.queued], ['running', s.running], ['max concurrent tasks', s.max_concurrent_tasks],
      ['supervised processes', s.children], ['zygote', s.zygote],
      ['triggers', Object.entries(s.triggers).map(([k, v]) => `${v} ${k}`).join(', ') || 'none'],
      ['failed triggers', s.failed_triggers.join(', ') || 'none'],
    ];
    return el('dl', { class: 'status' }, rows.map(([k, v]) => [el('dt', {}, k), el('dd', {}, String(v))]));
  });
}
