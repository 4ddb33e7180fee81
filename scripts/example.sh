#!/usr/bin/env bash
# Run an example on the default tinygrad backend, with the report of what ran where.
# It installs only what tinyjax itself needs (no device runtimes: your machine's are used).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec .venv/bin/tinyjax run "${1:-examples/quickstart.py}" --report
