// The approvals page: tool calls waiting for a person, with their arguments; approve or deny
// each, with a reason. The list refreshes itself, but never under a reason being typed.
import { get, post } from './api.js';
import { el, notice, pageLink, shortId, table, when } from './dom.js';

const REFRESH_MS = 2000;

export function approvalsPage(main) {
  const list = el('div', { id: 'approval-list' });
  const message = el('p', { id: 'approval-message', class: 'muted', 'aria-live': 'polite' });
  let shown = '';

  async function load(force) {
    let pending;
    try {
      pending = await get('/api/approvals');
    } catch (error) {
      list.replaceChildren(notice(error.message, 'error'));
      return;
    }
    const key = pending.map((a) => a.call).join(',');
    if (!force && key === shown) return;
    // A reason being typed holds the list still; one typed and left is carried into the new list.
    if (!force && list.contains(document.activeElement)) return;
    const reasons = new Map();
    for (const row of list.querySelectorAll('tr[data-call]')) {
      reasons.set(row.dataset.call, row.querySelector('input.reason').value);
    }
    shown = key;
    list.replaceChildren(pending.length ? render(pending, decide, reasons) : notice('No tool call is waiting.'));
  }

  async function decide(approval, approve, reason) {
    try {
      const done = await post('/api/approvals/decide', {
        task_id: approval.task_id, call: approval.call, approve, reason: reason || null,
      });
      message.textContent = `${done.tool} ${done.state}`;
    } catch (error) {
      message.textContent = error.message;
    }
    load(true);
  }

  main.replaceChildren(el('h1', {}, 'Approvals'), message, list);
  load(true);
  setInterval(() => { if (!document.hidden) load(false); }, REFRESH_MS);
}

function render(pending, decide, reasons) {
  const rows = pending.map((approval) => {
    const reason = el('input', { class: 'reason', placeholder: 'reason', maxlength: '1000' });
    reason.value = reasons.get(approval.call) || '';
    const approve = el('button', { type: 'button', class: 'approve' }, 'Approve');
    const deny = el('button', { type: 'button', class: 'deny' }, 'Deny');
    approve.addEventListener('click', () => decide(approval, true, reason.value));
    deny.addEventListener('click', () => decide(approval, false, reason.value));
    return el('tr', { 'data-call': approval.call },
      el('td', { class: 'mono' }, pageLink(['tasks', approval.task_id], shortId(approval.task_id)),
        ` node ${approval.handle}`),
      el('td', {}, `${approval.server} / ${approval.tool}`),
      el('td', {}, el('pre', { class: 'arguments' }, JSON.stringify(approval.arguments, null, 2))),
      el('td', { class: 'instruction' }, approval.instruction),
      el('td', {}, when(approval.requested_at), el('br'), `expires ${when(approval.expires_at)}`),
      el('td', {}, reason, ' ', approve, ' ', deny));
  });
  return table(['task', 'call', 'arguments', 'instruction', 'asked', 'decision'], rows);
}
