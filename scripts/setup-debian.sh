#!/usr/bin/env bash
# The machine side of the test setup: Debian packages the tests need where missing (etcd and
# ZooKeeper servers, Chromium for the browser tests, faketime, openssl), and the PostgreSQL
# this kind of machine runs, started if it is installed and down. Needs root or sudo only
# when a package is missing. The demo needs none of this (see the README's first command).
set -euo pipefail
cd "$(dirname "$0")/.."

running() { service "$1" status >/dev/null 2>&1; }

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
  # Debian starts a server package's service as it installs it; tenure's tests start private
  # servers. Stop only what this installation started: a service of a package installed now
  # that was not running before. Anything the machine already ran is left alone.
  started_by_us=()
  for pkg_svc in etcd-server:etcd zookeeper:zookeeper; do
    pkg=${pkg_svc%%:*}; svc=${pkg_svc##*:}
    case " ${need[*]} " in *" $pkg "*) running "$svc" || started_by_us+=("$svc") ;; esac
  done
  $sudo_ apt-get update -qq
  $sudo_ apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  for svc in ${started_by_us[@]+"${started_by_us[@]}"}; do
    if running "$svc"; then $sudo_ service "$svc" stop >/dev/null 2>&1 || true; fi
  done
fi

# The fencing tests use the PostgreSQL on 127.0.0.1:5432; start it if it is there and down.
if command -v pg_isready >/dev/null 2>&1 && ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "setup: starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start || true
fi
