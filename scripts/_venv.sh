# Sourced by scripts/run and scripts/test: find Python >= 3.12, make the venv, install.
# Usage: ensure_venv EXTRAS [MITMPROXY]   (e.g. "" or "dev,semantic"; "12.2.0" pins mitmproxy)
# The venv is $VENV (default .venv).

find_python() {
    local c v
    for c in "${PYTHON:-}" python3.13 python3.12 python3 python; do
        [ -n "$c" ] || continue
        command -v "$c" >/dev/null 2>&1 || continue
        if "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            command -v "$c"; return 0
        fi
    done
    # pyenv installs that are not the selected version (their shims refuse to run).
    for root in "${PYENV_ROOT:-}" "$HOME/.pyenv" /root/.pyenv /usr/local/pyenv; do
        [ -n "$root" ] && [ -d "$root/versions" ] || continue
        for v in $(ls -1 "$root/versions" 2>/dev/null | grep -E '^3\.(1[2-9]|[2-9][0-9])' | sort -rV); do
            c="$root/versions/$v/bin/python3"
            if [ -x "$c" ] && "$c" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
                echo "$c"; return 0
            fi
        done
    done
    return 1
}

ensure_venv() {
    local extras="$1" pin="${2:-}" venv="${VENV:-.venv}" py stamp want hash have
    if [ ! -x "$venv/bin/python" ]; then
        if ! py=$(find_python); then
            cat >&2 <<'MSG'
error: Python 3.12 or newer is required (mitmproxy 12 needs it) and none was found.
  Install one, then run this again:
    - Debian/Ubuntu:  apt-get install python3.12 python3.12-venv   (or a newer one)
    - pyenv:          pyenv install 3.12
    - or point to it: PYTHON=/path/to/python3.12 scripts/run
MSG
            exit 1
        fi
        echo "creating $venv with $py" >&2
        "$py" -m venv "$venv"
    fi
    # The stamp holds the pyproject hash, the mitmproxy pin and the extras installed; a run that
    # needs no more than what is there installs nothing (scripts/run and scripts/test share .venv).
    stamp="$venv/.tooldisco-installed"
    hash="$(sha256sum pyproject.toml | cut -c1-16)${pin:+@$pin}"
    have=""
    if [ -f "$stamp" ] && [ "$(cut -d' ' -f1 "$stamp")" = "$hash" ]; then
        have=$(cut -s -d' ' -f2 "$stamp" | tr -d '[]')
    fi
    want=$(printf '%s\n' ${have//,/ } ${extras//,/ } | grep -v '^$' | sort -u | paste -sd, -)
    if [ ! -f "$stamp" ] || [ "$(cut -d' ' -f1 "$stamp")" != "$hash" ] || [ "$want" != "$have" ]; then
        echo "installing dependencies into $venv (${want:-core}${pin:+, mitmproxy $pin})" >&2
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e ".${want:+[$want]}" \
            ${pin:+"mitmproxy==$pin"} >&2
        echo "$hash $want" > "$stamp"
    fi
}

# The lowest mitmproxy release pyproject.toml admits (its ">=" bound, padded to x.y.z).
lowest_mitmproxy() {
    local v
    v=$(grep -oE '"mitmproxy>=[0-9.]+' pyproject.toml | head -1 | cut -d= -f2)
    case "$v" in *.*.*) echo "$v" ;; *.*) echo "$v.0" ;; *) echo "$v.0.0" ;; esac
}
