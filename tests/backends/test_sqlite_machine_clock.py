"""SQLite's store clock is the machine's boot clock: a worker with a skewed wall clock
(Debian's faketime, one hour either way) can neither steal a live lease nor keep a dead one."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tenure
from devservers.availability import in_ci

ROOT = Path(__file__).resolve().parents[2]


def _faketime(offset: str, code: str) -> subprocess.CompletedProcess[str]:
    if shutil.which("faketime") is None:
        if in_ci():
            pytest.fail("faketime is not installed; scripts/setup.sh installs it")
        pytest.skip("faketime is not installed")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(["faketime", "-f", offset, sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("offset", ["+1h", "-1h"])
def test_a_skewed_worker_cannot_claim_a_live_lease(tmp_path: Path, offset: str) -> None:
    url = f"sqlite:///{tmp_path / 'skew.db'}"
    with tenure.connect(url) as store:
        held = store.claim("j", owner="honest", ttl=60.0)
        code = ("import tenure, time\n"
                f"s = tenure.connect({url!r})\n"
                "assert abs(time.time() - s.now()) > 3000, 'faketime did not skew this process'\n"
                "try:\n"
                "    s.claim('j', owner='skewed', ttl=60.0)\n"
                "    print('CLAIMED')\n"
                "except tenure.AlreadyClaimed:\n"
                "    print('REFUSED')\n")
        done = _faketime(offset, code)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "REFUSED"
        status = store.get("j")
        assert status is not None and (status.owner, status.token) == ("honest", held.token)


def test_a_skewed_worker_sees_the_same_store_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'skew.db'}"
    with tenure.connect(url) as store:
        code = f"import tenure; print(tenure.connect({url!r}).now())"
        done = _faketime("+1h", code)
        assert done.returncode == 0, done.stderr
        assert abs(float(done.stdout) - store.now()) < 5.0  # same clock, read a process start apart


# -- the clock's resolution, and what it cannot honour ---------------------------------------------
def test_the_store_clock_moves_in_steps_far_below_a_millisecond(tmp_path: Path) -> None:
    # /proc/uptime moved in 10 ms steps: a claim under TTL 0.1 s and the default 5 % margin
    # could be judged expired by the store before the holder's deadline.
    with tenure.connect(f"sqlite:///{tmp_path / 'c.db'}") as store:
        readings = [store.now()]
        while len(set(readings)) < 50:
            readings.append(store.now())
        steps = [b - a for a, b in itertools.pairwise(readings) if b != a]
        assert min(steps) < 1e-4, f"the store clock moves in steps of {min(steps):.6f} s"
        assert all(s > 0 for s in steps)  # and never back


def test_a_margin_below_the_store_clocks_resolution_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'c.db'}"
    with pytest.raises(tenure.InvalidArgument, match="drift_margin=0"):
        tenure.connect(url, drift_margin=0.0)
    with tenure.connect(url, drift_margin=1e-6) as store:
        with pytest.raises(tenure.InvalidArgument, match="clock's steps"):
            store.claim("j", owner="a", ttl=0.5)  # a margin of half a microsecond
        assert store.get("j") is None
    with tenure.connect(url) as store:
        store.claim("j", owner="a", ttl=0.05)  # 2.5 ms of margin: plenty for a 1 us clock


# -- processes that do not share the machine's boot clock ---------------------------------------------
def _unshare_time(boottime: int) -> list[str]:
    probe = subprocess.run(["unshare", "--time", "--boottime", str(boottime), "true"], capture_output=True)
    if probe.returncode != 0:
        if in_ci():
            pytest.fail(f"cannot create a time namespace: {probe.stderr!r}")
        pytest.skip("cannot create a time namespace here (needs CAP_SYS_ADMIN and Linux >= 5.6)")
    return ["unshare", "--time", "--boottime", str(boottime)]


def test_a_process_in_another_time_namespace_reads_the_machines_clock(tmp_path: Path) -> None:
    """A container started with a boot-time offset reads its own, shifted /proc/uptime: it
    used to see every lease 1,000 s nearer its end than the other processes did."""
    url = f"sqlite:///{tmp_path / 'ns.db'}"
    with tenure.connect(url) as store:
        held = store.claim("j", owner="honest", ttl=60.0)
        code = ("import tenure\n"
                f"s = tenure.connect({url!r})\n"
                "print(s.now())\n"
                "try:\n"
                "    s.claim('j', owner='shifted', ttl=60.0)\n"
                "    print('CLAIMED')\n"
                "except tenure.AlreadyClaimed:\n"
                "    print('REFUSED')\n")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        done = subprocess.run([*_unshare_time(1000), sys.executable, "-c", code], env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        seen, verdict = done.stdout.split()
        assert verdict == "REFUSED"
        assert abs(float(seen) - store.now()) < 5.0  # the same clock, a process start apart
        status = store.get("j")
        assert status is not None and (status.owner, status.token) == ("honest", held.token)


MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
40 27 0:50 / /mnt/shared rw,relatime - nfs4 server:/export rw,vers=4.2
41 27 0:51 / /mnt/shared/local\\040disk rw,relatime - ext4 /dev/sdb1 rw
42 27 0:52 / /home/me/remote rw,nosuid - fuse.sshfs me@host:/srv rw
"""


@pytest.mark.parametrize(("path", "kind"), [
    ("/mnt/shared/jobs.db", "nfs4"),
    ("/mnt/shared/sub/dir/jobs.db", "nfs4"),
    ("/mnt/shared/local disk/jobs.db", "ext4"),
    ("/home/me/remote/jobs.db", "fuse.sshfs"),
    ("/var/lib/jobs.db", "ext4"),
])
def test_the_filesystem_of_a_store_is_found(tmp_path: Path, path: str, kind: str) -> None:
    from tenure.backends.sqlite_clock import filesystem_type, refuse_network_filesystem

    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(MOUNTINFO)
    assert filesystem_type(path, str(mountinfo)) == kind
    if kind == "ext4":
        refuse_network_filesystem(path, str(mountinfo))
    else:
        with pytest.raises(tenure.InvalidArgument, match=f"on a {kind} filesystem"):
            refuse_network_filesystem(path, str(mountinfo))


def test_a_store_on_this_machines_disk_is_not_refused(tmp_path: Path) -> None:
    from tenure.backends.sqlite_clock import NETWORK_FILESYSTEMS, filesystem_type

    assert filesystem_type(str(tmp_path / "x.db")) not in NETWORK_FILESYSTEMS


def test_without_a_boot_id_an_offset_is_not_reused_after_a_reboot(tmp_path: Path) -> None:
    from tenure.backends.sqlite import SQLiteBackend
    from tenure.backends.sqlite_clock import MachineClock

    path = str(tmp_path / "noproc.db")
    uptime = [5000.0]

    def machine() -> MachineClock:
        return MachineClock(boot_id_path=str(tmp_path / "no-such-file"), reader=lambda: uptime[0],
                            namespace_offset=0.0)

    first = SQLiteBackend(path, machine_clock=machine())
    before = first.now()
    first.close()
    uptime[0] = 5001.0  # the same boot, a second later: the offset is kept
    again = SQLiteBackend(path, machine_clock=machine())
    assert again.now() == pytest.approx(before + 1.0, abs=1e-6)
    again.close()
    uptime[0] = 100.0  # the boot clock went back: the machine rebooted
    rebooted = SQLiteBackend(path, machine_clock=machine())
    assert abs(rebooted.now() - time.time()) < 5.0  # a new offset, not the old boot's
    rebooted.close()


# -- durability: item 19 --------------------------------------------------------------------------------
def test_synchronous_normal_is_refused_without_an_explicit_opt_in(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'n.db'}"
    with pytest.raises(tenure.InvalidArgument, match="same token"):
        tenure.connect(url + "?synchronous=NORMAL")
    assert not (tmp_path / "n.db").exists()  # refused before anything was written
    with tenure.connect(url + "?synchronous=NORMAL&power_loss_may_reuse_tokens=true") as store:
        store.claim("j", owner="a", ttl=5.0)
    with tenure.connect(url + "?synchronous=EXTRA") as store:
        assert store.get("j") is not None
