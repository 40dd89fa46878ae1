#!/usr/bin/env bash
# Cross-language uniqueness and fault runs (see run.py); part of scripts/test-all.sh.
set -euo pipefail
exec python3 "$(dirname "$0")/run.py" "$@"
