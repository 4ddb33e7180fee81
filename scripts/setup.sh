#!/usr/bin/env bash
# Install what tinyjax needs on a fresh Debian machine: clang (tinygrad's CPU compiler), a venv, the package.
#   source scripts/setup.sh [EXTRAS]    EXTRAS: the package's optional extras, e.g. "test,webgpu"
# Sourced by scripts/example.sh and scripts/test.sh; safe to run again (it skips what is already there).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${1:-}"
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"

# apt_install PACKAGE...: install the Debian packages that are missing
apt_install() {
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
}

apt_install clang  # tinygrad compiles CPU kernels with it

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  python3 -m venv .venv
fi

# Reinstall only when pyproject.toml or the extras asked for changed since the last install.
stamp=".venv/.tinyjax-installed"
wanted="$(cat pyproject.toml; echo "extras: $extras")"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
  echo "setup: installing tinyjax${extras:+ with $extras} into .venv" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".${extras:+[$extras]}"
  printf '%s' "$wanted" > "$stamp"
fi
