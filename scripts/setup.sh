#!/usr/bin/env bash
# Sets up a machine for tenure's tests: the Debian packages and services (setup-debian.sh),
# then a virtualenv in .venv with every extra and the dev dependency group (PEP 735, which
# needs pip >= 25.1: pip is upgraded first). Idempotent and quiet when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup-debian.sh

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.tenure-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing tenure, its extras and the dev group into .venv"
  .venv/bin/pip install -q --upgrade 'pip>=25.1' >/dev/null
  .venv/bin/pip install -q -e '.[all]' --group dev
  touch "$stamp"
fi
