# Sourced by scripts/check: install, on the first run, the parts outside Python that the tests run
# against. Each install is skipped when it is already current; a part that cannot be installed here
# leaves its tests to skip, each saying which package it needs.
#
# `test_parts_start` starts the installs in the background, so the download and unpacking of
# Chromium and the npm packages overlap the venv's install, ruff and mypy instead of following
# them (a minute or two of a clean machine's first run); `test_parts_wait` waits for them, prints
# what they said and fails when one failed. Both need ROOT.

test_parts_start() {
  parts_log_dir="$(mktemp -d "${TMPDIR:-/tmp}/agentd-parts.XXXXXX")"
  parts_pids=()
  parts_names=()
  _npm_part_start
  _apt_part_start
}

test_parts_wait() {
  local i status failed=0
  for i in "${!parts_pids[@]}"; do
    status=0
    wait "${parts_pids[$i]}" || status=$?
    cat "$parts_log_dir/${parts_names[$i]}.log"
    if [ "$status" -ne 0 ]; then
      echo "${parts_names[$i]}: the install failed (exit $status)" >&2
      failed=$status
    fi
  done
  rm -rf "$parts_log_dir"
  return "$failed"
}

_part_background() {  # NAME COMMAND...: run COMMAND in the background, its output to NAME's log
  local name=$1
  shift
  "$@" >"$parts_log_dir/$name.log" 2>&1 &
  parts_pids+=($!)
  parts_names+=("$name")
}

# The npm reference MCP servers and the MCP conformance suite (with the Node 22 it needs), pinned by
# tests/npm/package-lock.json and installed under tests/npm/node_modules (tests/support/npm_servers.py).
_npm_part_start() {
  local npm_dir="$ROOT/tests/npm"
  local npm_stamp="$npm_dir/node_modules/.agentd-installed"
  if [ -f "$npm_stamp" ] && [ ! "$npm_dir/package-lock.json" -nt "$npm_stamp" ]; then
    return 0
  fi
  if command -v npm >/dev/null; then
    echo "== npm ci (tests/npm: the npm MCP servers and the conformance suite; first run only, in the background)"
    _part_background npm sh -c 'npm ci --prefix "$1" --no-audit --no-fund --loglevel=error && touch "$2"' \
      sh "$npm_dir" "$npm_stamp"
  else
    echo "note: npm is not installed (Debian package \`npm\`): the tests that run the npm MCP servers will skip"
  fi
}

# Debian packages, installed together (one `apt-get update`) on the first run, as root:
# - systemd brings systemd-analyze (unit verify and the security score) and systemd-socket-activate
#   for tests/systemd; both work without systemd running as PID 1;
# - chromium and chromium-driver: the headless browser the dashboard's page tests drive (tests/web),
#   without recommended packages (fonts and the like the tests do not need).
_apt_part_start() {
  local apt_missing=()
  if ! command -v systemd-analyze >/dev/null || ! command -v systemd-socket-activate >/dev/null; then
    apt_missing+=(systemd)
  fi
  command -v chromium >/dev/null || apt_missing+=(chromium)
  command -v chromedriver >/dev/null || apt_missing+=(chromium-driver)
  if [ "${#apt_missing[@]}" -eq 0 ]; then
    return 0
  fi
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "== apt-get install ${apt_missing[*]} (for tests/systemd and tests/web; first run only, in the background)"
    _part_background apt sh -c 'export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" >/dev/null' sh "${apt_missing[@]}"
  else
    echo "note: missing Debian packages: ${apt_missing[*]} (systemd: tests/systemd skips those tests;" \
      "chromium, chromium-driver: the browser tests of tests/web skip)"
  fi
}
