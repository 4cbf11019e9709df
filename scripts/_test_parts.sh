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

# Debian packages, installed together (one `apt-get update`) on the first run, as root:
# - systemd brings systemd-analyze (unit verify and the security score) and systemd-socket-activate
#   for tests/systemd; both work without systemd running as PID 1;
# - chromium and chromium-driver: the headless browser the dashboard's page tests drive (tests/web),
#   without recommended packages (fonts and the like the tests do not need).
apt_missing=()
if ! command -v systemd-analyze >/dev/null || ! command -v systemd-socket-activate >/dev/null; then
  apt_missing+=(systemd)
fi
command -v chromium >/dev/null || apt_missing+=(chromium)
command -v chromedriver >/dev/null || apt_missing+=(chromium-driver)
if [ "${#apt_missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "== apt-get install ${apt_missing[*]} (for tests/systemd and tests/web; first run only)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${apt_missing[@]}" >/dev/null
  else
    echo "note: missing Debian packages: ${apt_missing[*]} (systemd: tests/systemd skips those tests;" \
      "chromium, chromium-driver: the browser tests of tests/web skip)"
  fi
fi
