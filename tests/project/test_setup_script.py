"""scripts/setup-debian.sh with stand-ins for apt-get and service on PATH: it stops only a
service its own installation started, never one the machine was already running."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "setup-debian.sh"

SERVICE = """#!/bin/sh
# service NAME status|stop: running services are files in $STATE
echo "service $*" >> "$LOG"
case "$2" in
  status) [ -e "$STATE/$1" ] ;;
  stop) rm -f "$STATE/$1" ;;
esac
"""
APT_GET = """#!/bin/sh
# apt-get install ... starts the service of each server package, as Debian's do.
echo "apt-get $*" >> "$LOG"
for word in "$@"; do
  case "$word" in etcd-server) touch "$STATE/etcd" ;; zookeeper) touch "$STATE/zookeeper" ;; esac
done
"""


def run_setup(tmp_path: Path, present: set[str], running: set[str]) -> list[str]:
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    bin_dir.mkdir()
    state.mkdir()
    for tool in ("dirname", "id", "ls", "head", "rm", "touch", "cat"):
        found = shutil.which(tool)
        assert found, tool
        os.symlink(found, bin_dir / tool)
    for name, text in (("service", SERVICE), ("apt-get", APT_GET),
                       *((tool, "#!/bin/sh\n") for tool in present)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    for svc in running:
        (state / svc).touch()
    log = tmp_path / "log"
    log.touch()
    bash = shutil.which("bash")
    assert bash
    done = subprocess.run([bash, str(SCRIPT)], env={"PATH": str(bin_dir), "LOG": str(log), "STATE": str(state)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return log.read_text().splitlines()


@pytest.mark.skipif(not Path("/usr/share/zookeeper").is_dir(), reason="the script looks for ZooKeeper's directory")
def test_installing_something_else_stops_no_service(tmp_path: Path) -> None:
    calls = run_setup(tmp_path, present={"etcd", "chromium", "openssl"}, running={"etcd"})
    assert any(c.startswith("apt-get install") and "faketime" in c for c in calls)
    assert not [c for c in calls if c.endswith(" stop")]  # the machine's etcd keeps running


@pytest.mark.skipif(not Path("/usr/share/zookeeper").is_dir(), reason="the script looks for ZooKeeper's directory")
def test_a_service_the_installation_started_is_stopped(tmp_path: Path) -> None:
    calls = run_setup(tmp_path, present={"chromium", "openssl", "faketime"}, running=set())
    assert [c for c in calls if c.endswith(" stop")] == ["service etcd stop"]


def test_nothing_missing_installs_nothing(tmp_path: Path) -> None:
    if not Path("/usr/share/zookeeper").is_dir():
        pytest.skip("the script looks for ZooKeeper's directory")
    calls = run_setup(tmp_path, present={"etcd", "chromium", "openssl", "faketime"}, running={"etcd", "zookeeper"})
    assert calls == []
