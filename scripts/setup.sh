#!/usr/bin/env bash
# Sets up a machine for tenure's tests: the Debian packages and services (setup-debian.sh),
# then a virtualenv in .venv with every extra, the dev dependency group and the bench group (the
# PostgreSQL benchmark's peer, tooz: it only adds packages, 38 s for the whole install) (PEP 735,
# which needs pip >= 25.1: pip is upgraded first). Idempotent and quiet when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup-debian.sh

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.tenure-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
  echo "setup: installing tenure, its extras and the dev and bench groups into .venv"
  .venv/bin/pip install -q --upgrade 'pip>=25.1' >/dev/null
  .venv/bin/pip install -q -e '.[all]' --group dev --group bench
  touch "$stamp"
fi
