#!/usr/bin/env bash
# Run the whole test suite (JAX on XLA is the oracle for every numerical test).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec .venv/bin/python -m pytest -n 2 -p no:cacheprovider "$@"
