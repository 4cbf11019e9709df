// Draws the page the path names.
import { tasksPage } from './tasks.js';
import { taskPage } from './task.js';
import { approvalsPage } from './approvals.js';
import { schedulesPage, triggersPage, daemonPage } from './operations.js';

const routes = [
  [/^\/$/, 'tasks', (main) => tasksPage(main)],
  [/^\/tasks\/([^/]+)$/, 'tasks', (main, m) => taskPage(main, decodeURIComponent(m[1]))],
  [/^\/approvals$/, 'approvals', (main) => approvalsPage(main)],
  [/^\/schedules$/, 'schedules', (main) => schedulesPage(main)],
  [/^\/triggers$/, 'triggers', (main) => triggersPage(main)],
  [/^\/daemon$/, 'daemon', (main) => daemonPage(main)],
];

function start() {
  const main = document.getElementById('page');
  for (const [pattern, name, draw] of routes) {
    const match = location.pathname.match(pattern);
    if (!match) continue;
    for (const a of document.querySelectorAll('nav a')) {
      a.classList.toggle('current', a.dataset.page === name);
    }
    draw(main, match);
    return;
  }
  main.replaceChildren(document.createTextNode('No such page.'));
}

start();
