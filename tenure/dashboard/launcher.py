"""Start the dashboard: ``tenure dashboard --url URL [--port N] [--admin]``, or ``start()``.

The app runs under ``python -m streamlit run`` in a child process, in a process group of its
own. Its settings travel in environment variables (see ``config``), so the store URL's
password and the admin secret never appear on a command line that ``ps`` shows. Streamlit's
own banner and start-up log are silenced: ``tenure dashboard`` prints one line, the address
to open in a browser. Ctrl-C, SIGTERM (``docker stop``, systemd, supervisord) and SIGHUP (a
closed terminal) stop the server and everything in its group before ``tenure dashboard``
exits: SIGTERM first, SIGKILL after ``STOP_GRACE`` seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

from tenure.cli.arguments import PORT, REFRESH
from tenure.cli.exits import for_error
from tenure.cli.processes import send_group
from tenure.core.errors import BackendUnavailable, InvalidArgument, LeaseError
from tenure.core.options import parse_url
from tenure.dashboard import config

APP = Path(__file__).with_name("app.py")
SECRET_ENV = "TENURE_ADMIN_SECRET"  # where an operator puts the admin secret for --admin
STOP_GRACE = 10.0  # seconds the server gets to exit after SIGTERM, before SIGKILL
STOPPING = (signal.SIGTERM, signal.SIGHUP)  # end a foreground run as Ctrl-C does


def command(port: int, host: str, app: Path = APP) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(app),
            "--server.headless=true", f"--server.port={port}", f"--server.address={host}",
            "--browser.gatherUsageStats=false", "--server.fileWatcherType=none",
            "--server.runOnSave=false", "--client.toolbarMode=viewer", "--logger.level=warning"]


def environment(url: str, *, admin_secret: str | None, refresh: float,
                base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env[config.URL_ENV] = url
    env[config.REFRESH_ENV] = repr(config.refresh_seconds(refresh))
    env.pop(config.ADMIN_SECRET_ENV, None)
    if admin_secret is not None:
        env[config.ADMIN_SECRET_ENV] = admin_secret
    # The app file imports tenure: make this copy importable even when it is not installed.
    package_root = str(APP.parents[2])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    return env


def start(url: str, *, port: int = 8501, host: str = "127.0.0.1", admin_secret: str | None = None,
          refresh: float = 1.0, app: Path = APP) -> subprocess.Popen[bytes]:
    """Start the dashboard in a child process and return at once (see ``wait_ready``).

    ``app``: another script that runs the app (benchmarks/dashboard_counted_app.py counts reads)."""
    parse_url(url)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise InvalidArgument(f"port must be a whole number from 1 to 65535, got {port!r}")
    if not isinstance(host, str) or not host:
        raise InvalidArgument(f"host must be a non-empty str, got {host!r}")
    if admin_secret is not None and (not isinstance(admin_secret, str) or len(admin_secret) < 8):
        raise InvalidArgument("the admin secret must be a str of at least 8 characters")
    env = environment(url, admin_secret=admin_secret, refresh=refresh)
    if importlib.util.find_spec("streamlit") is None:
        raise BackendUnavailable("the dashboard needs Streamlit: pip install 'tenure[dashboard]'")
    # stdout holds only Streamlit's banner ("You can now view ..."): the caller says where to look.
    return subprocess.Popen(command(port, host, app), env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, start_new_session=True)


def stop(proc: subprocess.Popen[bytes], grace: float = STOP_GRACE) -> None:
    """Stop the server and every process of its group: SIGTERM, then SIGKILL once the server
    ended or ``grace`` passed (what else is left in its group, having ignored SIGTERM, too)."""
    send_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    send_group(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def interrupted_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt while inside, as Ctrl-C does, so the caller's
    cleanup runs before it exits (only the main thread can set handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _interrupt) for signum in STOPPING}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Cleanup that a second Ctrl-C or SIGTERM must not cut short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in (signal.SIGINT, *STOPPING)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def wait_ready(proc: subprocess.Popen[bytes], host: str, port: int, timeout: float = 60.0) -> str:
    """The dashboard's address once it answers its health check; raises LeaseError if it exits
    or stays silent for ``timeout`` seconds."""
    address = f"http://{host}:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BackendUnavailable(f"the dashboard exited with code {proc.returncode} before answering")
        try:
            with urllib.request.urlopen(f"{address}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return address
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)  # polling a server that is starting up
    raise BackendUnavailable(f"the dashboard did not answer at {address} within {timeout:g}s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tenure dashboard``; the CLI adds ``--url`` itself."""
    parser.add_argument("--port", type=PORT, default=8501, help="port to serve on (default 8501)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--refresh", type=REFRESH, default=config.DEFAULT_REFRESH,
                        help="seconds between live refreshes, 0 for none (default 1)")
    parser.add_argument("--admin", action="store_true",
                        help=f"enable admin actions, unlocked by the secret in ${SECRET_ENV} "
                             "or --admin-secret-file")
    parser.add_argument("--admin-secret-file", metavar="PATH",
                        help="file holding the admin secret (instead of the environment)")


def admin_secret(args: argparse.Namespace, env: dict[str, str] | None = None) -> str | None:
    """The secret for ``--admin``, from the file named or the environment; None without --admin."""
    if not args.admin:
        if args.admin_secret_file:
            raise InvalidArgument("--admin-secret-file needs --admin")
        return None
    if args.admin_secret_file:
        try:
            secret = Path(args.admin_secret_file).read_text().strip()
        except OSError as exc:
            raise InvalidArgument(f"cannot read --admin-secret-file: {exc.strerror}") from None
    else:
        secret = (os.environ if env is None else env).get(SECRET_ENV, "")
    if len(secret) < 8:
        raise InvalidArgument(f"--admin needs a secret of at least 8 characters in ${SECRET_ENV} "
                              "or --admin-secret-file")
    return secret


def run(args: argparse.Namespace) -> int:
    """Serve in the foreground until Ctrl-C, SIGTERM, SIGHUP or the server exits; returns an exit code."""
    with interrupted_by_signals():
        try:
            secret = admin_secret(args)
            proc = start(args.url, port=args.port, host=args.host, admin_secret=secret,
                         refresh=args.refresh)
        except LeaseError as exc:
            print(f"tenure dashboard: {exc}", file=sys.stderr)
            return for_error(exc)
        try:
            address = wait_ready(proc, args.host, args.port)
            mode = "admin actions enabled" if secret else "read-only"
            print(f"tenure dashboard: open {address} in a browser ({mode}; store "
                  f"{parse_url(args.url).redacted()}; Ctrl-C to stop)", flush=True)
            return proc.wait()
        except LeaseError as exc:
            print(f"tenure dashboard: {exc}", file=sys.stderr)
            return for_error(exc)
        except KeyboardInterrupt:
            return 0
        finally:
            with uninterrupted():
                stop(proc)
