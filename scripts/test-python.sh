#!/usr/bin/env bash
# Builds and installs the Python package into a test venv (.venv-test) the way a user
# would (`pip install .`), then runs the pytest suite (tests/python).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=${LEAFID_TEST_VENV:-$root/.venv-test}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q pytest mypy prometheus_client
"$venv/bin/pip" install -q --force-reinstall --no-deps .
exec "$venv/bin/python" -m pytest -q tests/python "$@"
