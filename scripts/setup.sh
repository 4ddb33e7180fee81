#!/usr/bin/env bash
# Install what tinyjax needs on a fresh Debian machine: clang (tinygrad's CPU compiler), a venv, the package.
# Sourced by scripts/example.sh and scripts/test.sh; safe to run again (it skips what is already there).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v clang >/dev/null 2>&1; then
  echo "setup: installing clang (tinygrad compiles CPU kernels with it)" >&2
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  python3 -m venv .venv
fi

# Reinstall only when pyproject.toml changed since the last install.
stamp=".venv/.tinyjax-installed"
if [ ! -f "$stamp" ] || ! cmp -s pyproject.toml "$stamp"; then
  echo "setup: installing tinyjax and its test dependencies into .venv" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"
  cp pyproject.toml "$stamp"
fi
