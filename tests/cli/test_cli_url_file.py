"""``--url-file`` / ``TENURE_URL_FILE``: the store URL, password and all, in neither the command
line nor the environment of any ``tenure`` process; what ``TENURE_URL`` and ``--url`` leave
where the command ``tenure run`` runs can read them (docs/running-workers.md, "The store's
secrets")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import tenure
from devservers.postgres import MACHINE_URL, admin, cannot_start
from tenure.cli import main

ROOT = Path(__file__).resolve().parents[2]
SECRET = "Pw-" + uuid.uuid4().hex  # trust auth on the local PostgreSQL: any password is let in
# The command under the lease does what a curious command running as the same user can: read
# its parent's (tenure run's) command line and environment, and its own environment.
SNOOP = """import json, os, sys
read = lambda p: open(p, "rb").read().decode("utf-8", "replace")
ppid = os.getppid()
json.dump({"cmdline": read(f"/proc/{ppid}/cmdline"), "environ": read(f"/proc/{ppid}/environ"),
           "own": read("/proc/self/environ")}, open(sys.argv[1], "w"))
"""


def url_file(directory: Path, url: str, mode: int = 0o600) -> Path:
    path = directory / "store.url"
    path.write_text(url + "\n")
    path.chmod(mode)
    return path


def snoop(tmp_path: Path, words: list[str], env: dict[str, str]) -> dict[str, str]:
    """Run ``tenure WORDS... run j -- SNOOP``; what the command read, once it exited 0."""
    out = tmp_path / "seen.json"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TENURE_") and k != "PGPASSWORD"}
    done = subprocess.run([sys.executable, "-m", "tenure", *words, "run", "j", "--owner", "o", "--ttl", "30",
                           "--", sys.executable, "-c", SNOOP, str(out)],
                          env={**clean, "PYTHONPATH": str(ROOT), **env}, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    seen: dict[str, str] = json.loads(out.read_text())
    return seen


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL of the machine's PostgreSQL with a password, on a schema of its own (dropped after)."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    try:
        conn = admin(MACHINE_URL)
    except Exception as exc:  # psycopg missing or the server down: CI fails, elsewhere skips
        cannot_start(str(exc))
    with conn:
        user = conn.execute("SELECT current_user").fetchone()[0]
        host_and_db = MACHINE_URL.split("@", 1)[1]
        yield f"postgresql://{user}:{SECRET}@{host_and_db}?schema={schema}"
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.mark.parametrize("how", ["--url-file", "TENURE_URL_FILE"])
def test_with_a_url_file_no_process_shows_the_password(tmp_path: Path, pg_url: str, how: str) -> None:
    path = url_file(tmp_path, pg_url)
    words, env = (["--url-file", str(path)], {}) if how == "--url-file" else ([], {"TENURE_URL_FILE": str(path)})
    seen = snoop(tmp_path, words, env)
    assert SECRET not in seen["cmdline"] and SECRET not in seen["environ"] and SECRET not in seen["own"]
    with pytest.warns(tenure.InsecureTransportWarning), tenure.connect(pg_url) as store:  # the run's store:
        status = store.get("j")  # the job is completed there
        assert status is not None and status.state is tenure.JobState.COMPLETED


def test_tenure_url_and_url_stay_readable_by_the_command(tmp_path: Path) -> None:
    """What stripping the environment does not protect, as the docs say: the command's own
    environment is clean, but tenure run's is its initial one, and its argv is its argv."""
    url = f"memory://u:{SECRET}@snooped"
    by_env = snoop(tmp_path, [], {"TENURE_URL": url})
    assert SECRET not in by_env["own"] and SECRET in by_env["environ"]
    by_argv = snoop(tmp_path, ["--url", url], {})
    assert SECRET not in by_argv["own"] and SECRET in by_argv["cmdline"]


def test_every_command_takes_the_url_file_before_or_after_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TENURE_URL", raising=False)
    monkeypatch.delenv("TENURE_URL_FILE", raising=False)
    path = url_file(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}", mode=0o640)  # a group may share it
    assert main(["--url-file", str(path), "submit", "a"]) == 0
    assert main(["get", "a", "--url-file", str(path)]) == 0
    monkeypatch.setenv("TENURE_URL_FILE", str(path))
    capsys.readouterr()
    assert main(["-o", "json", "ls"]) == 0
    assert [job["job_id"] for job in json.loads(capsys.readouterr().out)] == ["a"]


@pytest.mark.parametrize(("mode", "content", "message"), [
    (0o644, "{url}", "is readable by every user (mode 0644)"),
    (0o620, "{url}", "is writable by others than its owner (mode 0620)"),
    (0o600, "\n \n", "must hold one URL on one line (empty)"),
    (0o600, "{url}\nsecond-line", "must hold one URL on one line (more than that)"),
])
def test_an_exposed_or_malformed_url_file_is_refused_unread(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int, content: str, message: str) -> None:
    path = url_file(tmp_path, content.format(url=f"sqlite:///{tmp_path / 'jobs.db'}?password={SECRET}"), mode)
    assert main(["--url-file", str(path), "submit", "a"]) == 64
    err = capsys.readouterr().err
    assert message in err and SECRET not in err
    assert not (tmp_path / "jobs.db").exists()  # nothing written


def test_a_url_file_of_another_user_and_ambiguous_sources_are_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TENURE_URL_FILE", raising=False)
    path = url_file(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}")
    assert main(["--url-file", str(path), "--url", "memory://", "ls"]) == 64
    assert "give --url or --url-file, not both" in capsys.readouterr().err
    monkeypatch.setenv("TENURE_URL", "memory://")
    monkeypatch.setenv("TENURE_URL_FILE", str(path))
    assert main(["ls"]) == 64
    assert "TENURE_URL and TENURE_URL_FILE are both set" in capsys.readouterr().err
    assert main(["--url-file", str(tmp_path / "missing"), "ls"]) == 64
    assert "No such file or directory" in capsys.readouterr().err
    if os.geteuid() == 0:  # only root can give a file away
        os.chown(path, 4242, -1)
        assert main(["--url-file", str(path), "ls"]) == 64
        assert "belongs to another user (uid 4242)" in capsys.readouterr().err


@pytest.mark.parametrize(("mode", "accepted"), [(0o644, False), (0o444, False), (0o440, True), (0o400, True)])
def test_a_mounted_secret_is_taken_in_the_modes_the_refusal_names(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: int, accepted: bool) -> None:
    """Kubernetes mounts a secret 0644 and Docker 0444 unless told otherwise: the refusal says
    which modes to mount it with, and those are taken."""
    path = url_file(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}", mode)
    assert main(["--url-file", str(path), "submit", "a"]) == (0 if accepted else 64)
    err = capsys.readouterr().err
    assert accepted or "a mounted secret: defaultMode 0440 with fsGroup, or 0400" in err
    text = " ".join((ROOT / "docs" / "running-workers.md").read_text().split())
    assert "`defaultMode: 0440` and the pod `securityContext.fsGroup`" in text and "`defaultMode: 0400`" in text


def test_the_docs_say_what_each_way_exposes() -> None:
    text = " ".join((ROOT / "docs" / "running-workers.md").read_text().split())
    assert "| `--url URL` | **every user of the machine**: `ps`, `/proc/<pid>/cmdline` |" in text
    assert "| `TENURE_URL=URL` | the same user and root: `/proc/<pid>/environ` |" in text
    assert ("neither `/proc/<pid>/cmdline` nor `/proc/<pid>/environ` of `tenure run` (or of any other command) "
            "holds the password") in text
    assert "a process cannot remove a variable from that copy" in text and "`chmod 600` it" in text


@pytest.mark.parametrize("variable", ["TENURE_URL", "TENURE_URL_FILE"])
def test_a_variable_set_but_empty_is_refused_not_read_as_the_default_store(
        variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A deployment whose secret failed to render must not claim jobs in the demo store of the
    working directory while the real store's holder runs them too."""
    monkeypatch.delenv("TENURE_URL", raising=False)
    monkeypatch.delenv("TENURE_URL_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(variable, "")
    assert main(["claim", "job-1", "--owner", "w", "--ttl", "5"]) == 64
    assert f"{variable} is set but empty" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # no tenure-demo.db
    text = " ".join((ROOT / "docs" / "running-workers.md").read_text().split())
    assert "as is `TENURE_URL` or `TENURE_URL_FILE` set but empty" in text
