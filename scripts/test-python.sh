#!/usr/bin/env bash
# Installs the Python package into a test venv (.venv-test), then runs the pytest suite
# (tests/python). The package comes from one of:
#   scripts/test-python.sh                     # `pip install .`, as a user would (maturin)
#   LEAFID_WHEEL=path.whl scripts/...          # a wheel built already: test-all.sh passes
#                                              # the one scripts/dist.sh built
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=${LEAFID_TEST_VENV:-$root/.venv-test}
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# pydantic: tests/python/test_orm_defaults.py checks the docs' string-id recipe.
"$venv/bin/pip" install -q pytest pytest-timeout mypy prometheus_client pydantic
# tests/python/test_frameworks.py: Django and SQLAlchemy on PostgreSQL and MySQL (about 5 s).
"$venv/bin/pip" install -q django 'sqlalchemy[asyncio]' 'psycopg[binary]' pymysql asyncpg aiomysql
"$venv/bin/pip" install -q --force-reinstall --no-deps "${LEAFID_WHEEL:-.}"
# A test that hangs (a forked child stuck, a wait that never ends) fails after 5
# minutes with every thread's stack, instead of holding the whole run to CI's limit.
exec "$venv/bin/python" -m pytest -q --timeout=300 tests/python "$@"
