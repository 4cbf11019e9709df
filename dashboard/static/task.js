// One task's page: what it is and spent, its tree, the timeline of each node's model calls, tool
// calls and waits, its events as they are journaled (server-sent events), its result, each
// node's transcript, and the buttons that cancel, fork and extend it.
import { get, post } from './api.js';
import { cost, el, fill, notice, pageLink, statusClass, when } from './dom.js';
import { drawTimeline } from './timeline.js';

const REFRESH_MIN_MS = 500;  // an action's re-read of the task, at most this often
const TRANSCRIPT_MIN_MS = 2000;  // a live transcript is read again at most this often

export function taskPage(main, taskId) {
  const page = new TaskPage(main, taskId);
  page.start();
}

class TaskPage {
  constructor(main, taskId) {
    this.main = main;
    this.taskId = taskId;
    this.base = `/api/tasks/${encodeURIComponent(taskId)}`;
    this.handle = '0';
    this.refreshing = null;
    this.lastRefresh = 0;
    this.sections = {
      head: el('section', { id: 'task-head' }),
      actions: el('section', { id: 'task-actions' }),
      tree: el('div', { id: 'tree' }),
      timeline: el('div', { id: 'timeline' }),
      result: el('div', { id: 'result' }),
      events: el('ol', { id: 'events', class: 'events' }),
      transcript: el('div', { id: 'transcript' }),
      message: el('p', { id: 'action-message', class: 'muted', 'aria-live': 'polite' }),
    };
  }

  start() {
    const s = this.sections;
    this.main.replaceChildren(
      s.head, s.actions, s.message,
      el('div', { class: 'columns' },
        el('section', {}, el('h2', {}, 'Tree'), s.tree),
        el('section', {}, el('h2', {}, 'Result'), s.result)),
      el('section', {}, el('h2', {}, 'Timeline'), s.timeline),
      el('section', {}, el('h2', {}, 'Transcript'), s.transcript),
      el('section', {}, el('h2', {}, 'Events'), s.events));
    this.refresh().then(() => {
      // When the task first stood drawn, in ms from the navigation's start (bench/web.py reads it).
      document.body.dataset.firstRender = String(Math.round(performance.now()));
      this.follow();
    });
  }

  async refresh() {
    this.lastRefresh = Date.now();
    let summary;
    try {
      summary = await get(this.base);
    } catch (error) {
      this.main.replaceChildren(el('h1', {}, 'Task'), notice(error.message, 'error'));
      return;
    }
    this.draw(summary);
  }

  draw(summary) {
    this.summary = summary;
    this.drawHead(summary.task);
    this.drawActions(summary.task);
    this.sections.tree.replaceChildren(drawTree(summary.tree, (handle) => this.showTranscript(handle)));
    this.sections.timeline.replaceChildren(drawTimeline(summary.timeline, summary.task));
    this.sections.result.replaceChildren(drawResult(summary.task));
    const ended = summary.task.state === 'terminal';
    if (Date.now() - (this.transcriptAt || 0) >= TRANSCRIPT_MIN_MS || (ended && !this.transcriptEnded)) {
      this.transcriptEnded = ended;
      this.showTranscript(this.handle);  // not awaited: the page stands drawn without it
    }
  }

  // After an action: read the task again, at most every REFRESH_MIN_MS.
  soon() {
    if (this.refreshing) return;
    const wait = Math.max(0, REFRESH_MIN_MS - (Date.now() - this.lastRefresh));
    this.refreshing = setTimeout(async () => {
      await this.refresh();
      this.refreshing = null;
    }, wait);
  }

  // The dashboard pushes each event and, while they arrive, the task's summary (at most twice a
  // second): the page asks for nothing while it watches.
  follow() {
    const source = new EventSource(`${this.base}/events`);
    source.onmessage = (message) => {
      this.sections.events.append(drawEvent(JSON.parse(message.data)));
    };
    source.addEventListener('summary', (message) => this.draw(JSON.parse(message.data)));
    // The stream ends with the task; a reconnect after that would replay it from the start.
    source.onerror = () => { if (this.sections.events.dataset.ended) source.close(); };
    source.addEventListener('end', () => {
      source.close();
      this.sections.events.dataset.ended = 'true';
      this.soon();
    });
    source.addEventListener('failed', (message) => {
      source.close();
      this.sections.message.textContent = JSON.parse(message.data).error;
    });
  }

  drawHead(task) {
    const usage = task.usage;
    const origin = [];
    if (task.trigger) origin.push(`trigger ${task.trigger}`, task.uri ? ` (${task.uri})` : '');
    if (task.schedule_id) origin.push(`schedule ${task.schedule_id}`);
    if (task.forked_from) {
      origin.push('forked from ', pageLink(['tasks', task.forked_from.task_id], task.forked_from.task_id),
        ` at step ${task.forked_from.step}`);
    }
    fill(this.sections.head,
      el('h1', {}, 'Task ', el('span', { class: 'mono' }, task.task_id), ' ',
        el('span', { class: statusClass(task), id: 'task-state' }, task.status || task.state)),
      el('p', { class: 'instruction-full' }, task.instruction),
      el('p', { class: 'usage' },
        `${usage.steps} steps · ${usage.tokens_in + usage.tokens_out} tokens · ${cost(usage.cost_usd)} · `,
        `${usage.model_calls} model calls · ${usage.tool_calls} tool calls · model ${task.model || 'default'} · `,
        `submitted ${when(task.created_at)}`, task.ended_at ? ` · ended ${when(task.ended_at)}` : ''),
      origin.length ? el('p', { class: 'muted' }, origin) : null,
      task.throttled ? el('p', { class: 'wait' },
        `waiting for ${task.throttled.endpoint}: ${task.throttled.blocked_by}`) : null);
  }

  // The controls are made once and only their state follows the task: a summary pushed while a
  // person types (twice a second while events arrive) must not take away what they typed.
  drawActions(task) {
    if (!this.controls) this.controls = this.makeActions();
    const { cancel, step, extend } = this.controls;
    cancel.disabled = task.state === 'terminal';
    extend.disabled = task.state !== 'awaiting_budget';
    if (!step.dataset.edited) step.value = String(task.usage.steps);
  }

  makeActions() {
    const cancel = el('button', { type: 'button', id: 'cancel' }, 'Cancel');
    cancel.addEventListener('click', () => this.act('cancel', {}, 'cancel asked'));
    const step = el('input', { type: 'number', min: '0', id: 'fork-step', size: '4' });
    for (const edit of ['input', 'change']) step.addEventListener(edit, () => { step.dataset.edited = 'true'; });
    const fork = el('button', { type: 'button', id: 'fork' }, 'Fork');
    fork.addEventListener('click', async () => {
      const done = await this.act('fork', { from_step: Number(step.value) }, null);
      if (done) {
        this.sections.message.replaceChildren('forked: ', pageLink(['tasks', done.task_id], done.task_id));
      }
    });
    const steps = el('input', { type: 'number', min: '1', id: 'extend-steps', placeholder: 'steps', size: '5' });
    const tokens = el('input', { type: 'number', min: '1', id: 'extend-tokens', placeholder: 'tokens', size: '7' });
    const extend = el('button', { type: 'button', id: 'extend' }, 'Extend');
    extend.addEventListener('click', async () => {
      const more = {};
      if (steps.value) more.steps = Number(steps.value);
      if (tokens.value) more.tokens = Number(tokens.value);
      if (await this.act('extend', more, 'extended')) {
        steps.value = '';
        tokens.value = '';
      }
    });
    this.sections.actions.replaceChildren(
      cancel, ' ', el('label', {}, 'from step ', step), ' ', fork, ' ', steps, ' ', tokens, ' ', extend);
    return { cancel, step, extend };
  }

  async act(action, body, said) {
    try {
      const done = await post(`${this.base}/${action}`, body);
      if (said) this.sections.message.textContent = said;
      this.soon();
      return done;
    } catch (error) {
      this.sections.message.textContent = error.message;
      return null;
    }
  }

  async showTranscript(handle) {
    this.handle = handle;
    this.transcriptAt = Date.now();
    const box = this.sections.transcript;
    try {
      const view = await get(`${this.base}/transcript?handle=${encodeURIComponent(handle)}`);
      box.replaceChildren(el('p', { class: 'muted' }, `node ${handle}`), drawTranscript(view));
    } catch (error) {
      box.replaceChildren(notice(error.message, 'error'));
    }
  }
}

function drawTree(nodes, choose) {
  const list = el('ul', { class: 'tree' });
  for (const node of nodes) {
    const label = el('button', { type: 'button', class: `node ${statusClass(node)}`, 'data-handle': node.handle },
      node.handle, ' ', node.status || node.state);
    label.addEventListener('click', () => choose(node.handle));
    list.append(el('li', {}, label,
      el('span', { class: 'muted' },
        ` ${node.steps} steps · ${node.tokens} tokens · ${cost(node.cost_usd)}`),
      node.children.length ? drawTree(node.children, choose) : null));
  }
  return list;
}

function text(value) {
  if (value === null || value === undefined) return '';
  return typeof value === 'string' ? value : JSON.stringify(value, null, 2);
}

function drawResult(task) {
  if (task.state !== 'terminal') return notice('Not ended yet.');
  return el('div', {},
    el('p', {}, el('span', { class: statusClass(task) }, task.status), task.partial ? ' (partial)' : '',
      task.exit_code !== null ? ` · exit ${task.exit_code}` : ''),
    task.error ? el('p', { class: 'error' }, `${task.error.kind}: ${task.error.message || ''}`) : null,
    el('pre', { class: 'result', id: 'result-text' }, text(task.result)));
}

function drawEvent(event) {
  return el('li', { 'data-seq': String(event.seq) },
    el('span', { class: 'mono muted' }, `${event.seq} ${new Date(event.ts * 1000).toLocaleTimeString()} `),
    el('b', {}, event.event), ' ',
    el('span', { class: 'fields' }, JSON.stringify(event.fields)));
}

function drawTranscript(view) {
  if (!view.steps.length) return notice('No steps yet.');
  return el('ol', { class: 'transcript' }, view.steps.map((step) => {
    const item = step.item;
    if (item.kind === 'reply') {
      return el('li', { class: 'reply' }, el('b', {}, `model (${item.purpose})`),
        item.text ? el('pre', {}, item.text) : null,
        item.refusal ? el('pre', { class: 'error' }, `refused: ${item.refusal}`) : null,
        item.tool_calls.map((call) => el('pre', { class: 'call' },
          `→ ${call.name} ${call.arguments ? JSON.stringify(call.arguments) : call.raw_arguments}`)));
    }
    if (item.kind === 'result') {
      return el('li', { class: item.is_error ? 'tool error' : 'tool' },
        el('b', {}, `tool ${item.name}`), el('pre', {}, item.text));
    }
    if (item.kind === 'start') return el('li', { class: 'muted' }, `starting ${item.name}`);
    return el('li', { class: 'muted' }, `${item.kind} ${JSON.stringify(item)}`);
  }), view.more ? el('li', { class: 'muted' }, 'more steps follow') : null);
}
