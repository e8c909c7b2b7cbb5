#!/usr/bin/env bash
# Create (idempotently) the two isolated venvs that host the peer memory engines
# engramdb is benchmarked against:
#
#   <repo>/.bench/venvs/naqsha  python3.11 + naqsha==0.2.0
#   <repo>/.bench/venvs/nooa    python3.12 + nooa-memory==0.0.10 (+ numpy)
#
# Needs only PyPI access. Re-running is cheap: a venv whose pinned package is
# already installed is left alone.
#
# Overrides (environment):
#   ENGRAMDB_BENCH_DIR   where .bench lives (default: <repo>/.bench)
#   PEER_PY311           python3.11 interpreter to use
#   PEER_PY312           python3.12 interpreter to use
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
BENCH_DIR="${ENGRAMDB_BENCH_DIR:-$REPO/.bench}"
VENVS="$BENCH_DIR/venvs"

NAQSHA_PIN="naqsha==0.2.0"
NOOA_PIN="nooa-memory==0.0.10"

die() { echo "peers/setup.sh: ERROR: $*" >&2; exit 1; }

# is_version PY MAJOR.MINOR -> 0 if PY runs and is that minor version
is_version() {
    local py="$1" want="$2"
    [ -x "$py" ] || command -v "$py" >/dev/null 2>&1 || return 1
    local got
    got="$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" || return 1
    [ "$got" = "$want" ]
}

# find_python MAJOR.MINOR [explicit] -> prints an interpreter path
find_python() {
    local want="$1" explicit="${2:-}" cand
    local -a cands=()
    [ -n "$explicit" ] && cands+=("$explicit")
    cands+=("python$want")
    if command -v pyenv >/dev/null 2>&1; then
        local root
        root="$(pyenv root 2>/dev/null || true)"
        if [ -n "$root" ]; then
            # newest patch release first
            while IFS= read -r cand; do cands+=("$cand"); done < <(
                ls -d "$root"/versions/"$want".*/bin/python"$want" 2>/dev/null | sort -rV || true)
        fi
    fi
    while IFS= read -r cand; do cands+=("$cand"); done < <(
        ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$want".*/bin/python"$want" \
              /usr/bin/python"$want" /usr/local/bin/python"$want" 2>/dev/null | sort -rV || true)
    for cand in "${cands[@]}"; do
        if is_version "$cand" "$want"; then
            # resolve to the real interpreter (pyenv shims may refuse to run
            # a version that is not selected for this directory)
            "$cand" -c 'import sys; print(sys.executable)'
            return 0
        fi
    done
    return 1
}

# make_venv NAME PY PIN [extra packages...]
make_venv() {
    local name="$1" py="$2" pin="$3"; shift 3
    local dir="$VENVS/$name"
    local vpy="$dir/bin/python"
    local pkg="${pin%%==*}" ver="${pin##*==}"
    if [ -x "$vpy" ] && "$vpy" - "$pkg" "$ver" "$@" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
pkg, ver, *extra = sys.argv[1:]
assert version(pkg) == ver
for e in extra:
    version(e)
EOF
    then
        echo "[$name] up to date: $vpy ($pin)"
        return 0
    fi
    if [ ! -x "$vpy" ]; then
        echo "[$name] creating venv with $py"
        "$py" -m venv "$dir" || die "could not create $dir with $py (on Debian/Ubuntu: apt-get install python$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-venv)"
    fi
    echo "[$name] installing $pin $*"
    "$vpy" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
    "$vpy" -m pip install --quiet "$pin" "$@"
    "$vpy" -c "from importlib.metadata import version; print('[$name] installed $pkg', version('$pkg'))"
}

PY311="$(find_python 3.11 "${PEER_PY311:-}")" \
    || die "python3.11 not found (put it on PATH, install it with pyenv, or set PEER_PY311)"
PY312="$(find_python 3.12 "${PEER_PY312:-}")" \
    || die "python3.12 not found; nooa-memory needs Python >= 3.12. Install it (e.g. 'pyenv install 3.12') or set PEER_PY312=/path/to/python3.12"

mkdir -p "$VENVS"
make_venv naqsha "$PY311" "$NAQSHA_PIN"
make_venv nooa "$PY312" "$NOOA_PIN" numpy

echo
echo "peer venvs:"
echo "  naqsha: $VENVS/naqsha/bin/python  (base $PY311)"
echo "  nooa:   $VENVS/nooa/bin/python  (base $PY312)"
