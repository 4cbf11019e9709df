// The dashboard's JSON API, same origin only. A change sends this session's CSRF token, which
// only a page of this origin can read (GET /api/session).

let csrf = null;

async function answer(response) {
  let body;
  try {
    body = await response.json();
  } catch {
    body = { error: `${response.status} ${response.statusText}` };
  }
  if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
  return body;
}

export async function get(path) {
  return answer(await fetch(path, { credentials: 'same-origin', headers: { accept: 'application/json' } }));
}

export async function post(path, body) {
  if (csrf === null) csrf = (await get('/api/session')).csrf;
  return answer(await fetch(path, {
    method: 'POST',
    credentials: 'same-origin',
    headers: { 'content-type': 'application/json', 'x-csrf-token': csrf, accept: 'application/json' },
    body: JSON.stringify(body || {}),
  }));
}
