# Sourced by scripts/check after _venv.sh: install, on the first run, the parts outside Python that
# the tests run against. Each install is skipped when it is already current; a part that cannot be
# installed here leaves its tests to skip, each saying which package it needs.

# The npm reference MCP servers and the MCP conformance suite (with the Node 22 it needs), pinned by
# tests/npm/package-lock.json and installed under tests/npm/node_modules (tests/support/npm_servers.py).
npm_dir="$ROOT/tests/npm"
npm_stamp="$npm_dir/node_modules/.agentd-installed"
if [ ! -f "$npm_stamp" ] || [ "$npm_dir/package-lock.json" -nt "$npm_stamp" ]; then
  if command -v npm >/dev/null; then
    echo "== npm ci (tests/npm: the npm MCP servers and the conformance suite; first run only)"
    npm ci --prefix "$npm_dir" --no-audit --no-fund --loglevel=error
    touch "$npm_stamp"
  else
    echo "note: npm is not installed (Debian package \`npm\`): the tests that run the npm MCP servers will skip"
  fi
fi

# Debian's systemd package brings systemd-analyze (unit verify and the security score) and
# systemd-socket-activate for tests/systemd; both work without systemd running as PID 1.
if ! command -v systemd-analyze >/dev/null || ! command -v systemd-socket-activate >/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "== apt-get install systemd (systemd-analyze, systemd-socket-activate for tests/systemd; first run only)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null
  else
    echo "note: systemd-analyze or systemd-socket-activate is missing (Debian package \`systemd\`): tests/systemd will skip those tests"
  fi
fi
