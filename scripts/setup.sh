#!/usr/bin/env bash
# Sets up a fresh machine for tenure: Debian packages (etcd and ZooKeeper servers, Chromium
# for the browser test, faketime) where missing, and a virtualenv in .venv with every extra.
# Idempotent and quiet when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
[ -d /usr/share/zookeeper ] || need+=(zookeeper)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v faketime >/dev/null 2>&1 || need+=(faketime)
command -v openssl >/dev/null 2>&1 || need+=(openssl)  # test certificates for ZooKeeper TLS
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
  $sudo_ apt-get update -qq
  $sudo_ apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # The Debian packages start their own services; tenure's tests start private servers.
  for svc in etcd zookeeper; do $sudo_ service "$svc" stop >/dev/null 2>&1 || true; done
fi

# The fencing tests use the PostgreSQL this kind of machine runs on 127.0.0.1:5432.
if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "setup: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.tenure-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing tenure and its extras into .venv"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  .venv/bin/pip install -q -e '.[all,dev]'
  touch "$stamp"
fi
