# Sourced by scripts/test (and scripts that need a real server): Debian packages the tests
# use as real parts (redis-server, chromium, chromium-driver), installed when missing.
# Usage: ensure_debian_packages PACKAGE...   Needs root or sudo and apt; without them it says
# what is missing and goes on (the tests that need a package then skip and say why).

ensure_debian_packages() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    local sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then sudo="sudo -n"; else
            echo "warning: Debian packages missing and no root to install them: ${missing[*]}" >&2
            return 0
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "warning: no apt-get to install ${missing[*]}" >&2
        return 0
    fi
    echo "installing Debian packages: ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq >/dev/null 2>&1 || true
    $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}
