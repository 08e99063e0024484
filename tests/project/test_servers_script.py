"""scripts/servers.sh with stand-ins for apt-get and apt-cache on PATH (no network): it unpacks
only a package whose SHA256 the signed index names, and is quiet once the server is there."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "servers.sh"

APT_GET = """#!/bin/sh
# apt-get ... update | download PACKAGE: the download is the test's package
for word in "$@"; do last=$word; done
case " $* " in *" download "*) cp "$DEB" "./${last}_3.5.99-1_amd64.deb" ;; esac
"""
APT_CACHE = """#!/bin/sh
# apt-cache ... show PACKAGE=VERSION: the index's entry, with the SHA256 the test gives
echo "Package: etcd-server"
echo "SHA256: $INDEX_SHA256"
"""


def fake_etcd_deb(directory: Path) -> Path:
    root = directory / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text("Package: etcd-server\nVersion: 3.5.99-1\nArchitecture: amd64\n"
                                             "Maintainer: t <t@example.org>\nDescription: test\n")
    (root / "usr" / "bin").mkdir(parents=True)
    for tool in ("etcd", "etcdutl"):
        (root / "usr" / "bin" / tool).write_text("#!/bin/sh\necho 'etcd Version: 3.5.99'\n")
        (root / "usr" / "bin" / tool).chmod(0o755)
    deb = directory / "etcd.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)], check=True, capture_output=True)
    return deb


def run_script(tmp_path: Path, deb: Path, index_sha256: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, text in (("apt-get", APT_GET), ("apt-cache", APT_CACHE)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "DEB": str(deb),
           "INDEX_SHA256": index_sha256, "TENURE_SERVERS_DIR": str(tmp_path / "cache")}
    bash = shutil.which("bash")
    assert bash
    return subprocess.run([bash, str(SCRIPT), "etcd"], env=env, capture_output=True, text=True, timeout=60)


def test_a_package_whose_hash_the_index_does_not_name_is_not_unpacked(tmp_path: Path) -> None:
    deb = fake_etcd_deb(tmp_path)
    done = run_script(tmp_path, deb, "0" * 64)
    assert done.returncode != 0 and "does not match the signed index" in done.stderr, done
    assert not list((tmp_path / "cache").glob("etcd-*")), "nothing unpacked"


def test_a_verified_package_is_unpacked_once_and_then_the_script_is_quiet(tmp_path: Path) -> None:
    deb = fake_etcd_deb(tmp_path)
    sha256 = hashlib.sha256(deb.read_bytes()).hexdigest()
    first = run_script(tmp_path, deb, sha256)
    assert first.returncode == 0, first
    assert first.stdout == "servers: etcd Version: 3.5.99\n"
    assert (tmp_path / "cache" / "etcd-3.5.99" / "etcd").exists()
    again = run_script(tmp_path, deb, "0" * 64)  # present: nothing fetched, nothing checked, nothing said
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
