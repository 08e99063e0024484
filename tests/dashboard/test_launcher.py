"""The launcher and settings: validation, what reaches the child's environment, foreground run."""

from __future__ import annotations

import argparse
import csv as csv_module
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import tenure
from devservers.ports import free_port
from tenure.cli import processes
from tenure.dashboard import config, data, launcher
from tests.dashboard.seeding import JOB, seed_example, seed_on_server

ROOT = Path(__file__).parents[2]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="sqlite:///x.db")  # the CLI adds this one itself
    launcher.add_arguments(parser)
    return parser.parse_args(argv)


def test_child_environment_carries_settings_not_argv() -> None:
    env = launcher.environment("etcd://u:pw-123@h:2379/p", admin_secret=None, refresh=2,
                               base={config.ADMIN_SECRET_ENV: "inherited", "PYTHONPATH": "/x"})
    assert env[config.URL_ENV] == "etcd://u:pw-123@h:2379/p" and env[config.REFRESH_ENV] == "2.0"
    assert "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION" not in env  # tenure chooses no protobuf runtime
    assert config.ADMIN_SECRET_ENV not in env  # admin only when this launch asked for it
    assert env["PYTHONPATH"].split(os.pathsep) == [str(ROOT), "/x"]
    assert not any("pw-123" in part for part in launcher.command(8501, "127.0.0.1"))


@pytest.mark.parametrize("kwargs", [{"port": 0}, {"port": "80"}, {"host": ""}, {"refresh": -1},
                                    {"refresh": "soon"}, {"admin_secret": "short"}])
def test_start_rejects_bad_arguments(kwargs: dict[str, object]) -> None:
    with pytest.raises(tenure.InvalidArgument):
        launcher.start("memory://", **kwargs)  # type: ignore[arg-type]


def test_bad_url_is_named_without_echoing_it() -> None:
    with pytest.raises(tenure.InvalidArgument) as caught:
        config.from_env({config.URL_ENV: "user:hunter2@nowhere"})
    assert config.URL_ENV in str(caught.value) and "hunter2" not in str(caught.value)
    assert config.from_env({}).url == config.DEFAULT_URL
    assert config.from_env({config.FALLBACK_URL_ENV: "memory://x"}).url == "memory://x"


def test_admin_secret_comes_from_environment_or_file(tmp_path: Path) -> None:
    assert launcher.admin_secret(_args(), {launcher.SECRET_ENV: "ignored-without-admin"}) is None
    assert launcher.admin_secret(_args("--admin"), {launcher.SECRET_ENV: "s3cret-value"}) == "s3cret-value"
    path = tmp_path / "secret"
    path.write_text("from-a-file-123\n")
    assert launcher.admin_secret(_args("--admin", "--admin-secret-file", str(path)), {}) == "from-a-file-123"
    for argv, env in [(("--admin",), {}), (("--admin",), {launcher.SECRET_ENV: "short"}),
                      (("--admin-secret-file", str(path)), {}),
                      (("--admin", "--admin-secret-file", str(tmp_path / "none")), {})]:
        with pytest.raises(tenure.InvalidArgument):
            launcher.admin_secret(_args(*argv), env)


def test_run_serves_in_the_foreground_until_interrupted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'fg.db'}"
    script = ("import argparse, sys; from tenure.dashboard import launcher\n"
              "p = argparse.ArgumentParser(); p.add_argument('--url'); launcher.add_arguments(p)\n"
              "sys.exit(launcher.run(p.parse_args(sys.argv[1:])))\n")
    port = str(free_port())
    proc = subprocess.Popen([sys.executable, "-c", script, "--url", url, "--port", port],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            preexec_fn=_default_sigint)
    try:
        assert proc.stdout is not None
        # Printed once the health check answers.
        line = next(ln for ln in proc.stdout if ln.startswith("tenure dashboard:"))
        assert f"open http://127.0.0.1:{port} in a browser (read-only; store {url}; Ctrl-C to stop)" in line
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _descendants(pid: int) -> list[int]:
    below: dict[int, list[int]] = {}
    for p in processes.table().values():
        below.setdefault(p.ppid, []).append(p.pid)
    found, todo = [], list(below.get(pid, []))
    while todo:
        found.append(todo.pop())
        todo.extend(below.get(found[-1], []))
    return found


def _refused(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("signum", launcher.STOPPING)
def test_sigterm_and_sighup_end_a_foreground_run_as_ctrl_c_does(signum: int) -> None:
    # A closed terminal sends HUP; docker stop, systemd and supervisord send TERM.
    previous = signal.getsignal(signum)
    with pytest.raises(KeyboardInterrupt), launcher.interrupted_by_signals():
        os.kill(os.getpid(), signum)
        time.sleep(5)  # never reached in full: the handler raises as soon as the signal lands
    assert signal.getsignal(signum) is previous  # put back on leaving


@pytest.mark.slow
def test_sigterm_stops_the_server_and_one_line_says_where_to_look(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'stop.db'}"
    tenure.connect(url).close()  # the dashboard reads a store, never creates one
    port = free_port()
    started: list[int] = []
    proc = subprocess.Popen([sys.executable, "-m", "tenure", "--url", url, "dashboard", "--port", str(port)],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == (f"tenure dashboard: open http://127.0.0.1:{port} in a browser "
                        f"(read-only; store {url}; Ctrl-C to stop)\n")
        started += _descendants(proc.pid)
        assert started and not _refused(port)
        proc.send_signal(signal.SIGTERM)  # what docker stop, systemd and supervisord send
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert (out, err) == ("", "")  # no Streamlit banner, no "Uvicorn server started"
        assert _refused(port)
        assert not [pid for pid in started if processes.running(pid)]
    finally:
        _kill_all(proc, started)


@pytest.mark.slow
def test_sigterm_stops_the_demo_its_workers_and_its_dashboard(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    port = free_port()
    started: list[int] = []
    proc = subprocess.Popen([sys.executable, "-m", "tenure", "--url", url, "demo", "--port", str(port),
                             "--ttl", "1", "--every", "600"],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "submitted" in line:  # the workers are started by then
                break
        started += _descendants(proc.pid)
        assert len(started) >= 3 and not _refused(port)  # the dashboard and two workers at least
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert _refused(port)
        # multiprocessing's resource tracker ends when the demo's exit closes its pipe: just after.
        assert _left_running(started, within=5.0) == []
    finally:
        _kill_all(proc, started)


def test_a_signal_while_the_demos_dashboard_starts_stops_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    # SIGTERM (docker stop) landing while the demo waits for its dashboard to answer: the
    # server must not be left serving, re-parented to init.
    from tenure.cli import demo

    servers: list[subprocess.Popen[bytes]] = []
    real_start = launcher.start

    def start(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        servers.append(real_start(*args, **kwargs))  # type: ignore[arg-type]
        return servers[-1]

    def wait_ready(*args: object, **kwargs: object) -> str:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises here, while the server starts
        raise AssertionError("the signal did not interrupt the wait")

    parser = argparse.ArgumentParser()
    parser.add_argument("--url")
    demo.add_arguments(parser)
    args = parser.parse_args(["--url", f"sqlite:///{tmp_path / 'demo.db'}", "--port", str(free_port())])
    monkeypatch.setattr(launcher, "start", start)
    monkeypatch.setattr(launcher, "wait_ready", wait_ready)
    try:
        try:
            code = demo.run(args)
        except KeyboardInterrupt:  # as pytest would read it: the end of the whole session
            pytest.fail("the signal escaped tenure demo")
        assert code == 0
        assert "stopping" in capsys.readouterr().out
        assert servers and servers[0].poll() is not None, "the dashboard was left serving"
    finally:
        for server in servers:
            server.kill()
            server.wait()


def _left_running(pids: list[int], within: float) -> list[int]:
    """Those of ``pids`` still running ``within`` seconds from now (fewer as they end)."""
    deadline = time.monotonic() + within
    while (left := [pid for pid in pids if processes.running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _kill_all(proc: subprocess.Popen[str], started: list[int]) -> None:
    """After a failure: nothing the test started may outlive it."""
    for pid in {*started, *_descendants(proc.pid)}:
        if processes.running(pid):
            os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.wait()


def test_run_reports_a_missing_admin_secret(capsys: pytest.CaptureFixture[str]) -> None:
    args = _args("--admin")
    os.environ.pop(launcher.SECRET_ENV, None)
    assert launcher.run(args) == 64  # the CLI's usage status, as README's table says
    assert launcher.SECRET_ENV in capsys.readouterr().err


def test_server_seeding_hook_tells_the_same_story() -> None:
    clock = tenure.ManualClock()
    with tenure.connect("memory://", clock=clock) as store:
        seed_on_server(store, ttl=5.0)
        (rejected,) = store.rejections()
        assert (rejected.job_id, rejected.owner, rejected.current_owner) == (JOB, "worker-a", "worker-b")


def test_exports_hold_every_field() -> None:
    clock = tenure.ManualClock()
    with tenure.connect("memory://", clock=clock) as store:
        seed_example(store, clock)
        rejections = store.rejections()
    csv = data.rejections_csv(rejections).decode()
    assert csv.splitlines()[0] == ",".join(data.REJECTION_COLUMNS) and "ledger/42" in csv
    assert len(csv.splitlines()) == 3
    records = json.loads(data.rejections_json(rejections))
    assert [r["op"] for r in records] == ["complete", "effect"]
    assert records[1] == {"job_id": JOB, "op": "effect", "owner": "worker-a", "token": 1,
                          "current_owner": None, "current_token": 2, "at": rejections[1].at,
                          "reason": "token lower than one already admitted", "kind": "destination",
                          "resource": "ledger/42"}


def test_csv_export_quotes_cells_a_spreadsheet_would_run_as_formulas() -> None:
    with tenure.connect("memory://") as store:
        for i, text in enumerate(["=HYPERLINK(\"http://x\")", "+1+1", "-2+3", "@SUM(A1)"]):
            store.report_rejection(text, f"{text} owner", i + 1, resource=f"{text}/r", highest=9,
                                   reason=f"{text} reason")
        store.report_rejection("plain-job", "w", 5, resource="ledger", highest=9)
        rows = list(csv_module.DictReader(io.StringIO(data.rejections_csv(store.rejections()).decode())))
    assert [r["job"] for r in rows] == ["plain-job", "'@SUM(A1)", "'-2+3", "'+1+1", "'=HYPERLINK(\"http://x\")"]
    for row in rows[1:]:
        assert all(row[c].startswith("'") for c in ("job", "owner", "reason", "resource"))
    assert rows[0]["resource"] == "ledger" and rows[0]["token"] == "5"


def _default_sigint() -> None:
    # A shell starts background jobs with SIGINT ignored and children inherit that; the test
    # sends the Ctrl-C a person would, so the child gets Python's usual handler back.
    import signal

    signal.signal(signal.SIGINT, signal.default_int_handler)
