#!/usr/bin/env bash
# The long fuzz run: random jax.numpy programs (tests/test_fuzz.py) against JAX, from a random seed.
#   bash scripts/fuzz.sh [examples per test, default 2000] [seed, default random]
# It prints the seed first (run again with it to replay the same programs) and, for a failure, the falsifying
# program as Python source; the statistics say how many programs raised, were rescued by XLA or not compared.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
examples="${1:-2000}"
seed="${2:-$RANDOM$RANDOM}"
echo "fuzz: $examples examples per test, seed $seed (replay: bash scripts/fuzz.sh $examples $seed)"
TINYJAX_FUZZ_EXAMPLES="$examples" exec .venv/bin/python -m pytest -p no:cacheprovider tests/test_fuzz.py \
  -k random_programs --hypothesis-seed="$seed" --hypothesis-show-statistics
