"""``tenure run JOB -- CMD``: run a command while holding the job's lease.

Like ``etcdctl lock`` and ``consul lock``, with a fencing token and an audit. The command runs
in its own process group with ``TENURE_JOB``, ``TENURE_TOKEN`` and ``TENURE_OWNER`` set; the
lease is renewed in the background while it runs. Outcomes:

- the command exits 0: the job is completed (its result records the exit status); exit 0;
- it exits non-zero or is killed: the job is released at once; exit with its status
  (128 + signal number when a signal ended it);
- the job is already completed: the command does not run; exit 0, so a scheduler can rerun;
- the job is held elsewhere: exit 75 at once, or after ``--wait`` seconds of waiting;
- the lease is lost while it runs (a renewal refused, or the safe deadline passed): the
  process group gets SIGTERM, then SIGKILL after ``--grace`` seconds; exit 75;
- SIGINT, SIGTERM or SIGHUP to ``tenure run``: passed on to the process group (SIGKILL after
  ``--grace`` if it outlives it), the job is released, exit 128 + that signal's number. One
  that arrives before the command started (while claiming or waiting) is not lost: the command
  does not run, a lease already claimed is released, exit 128 + its number.

The command's environment is ``tenure run``'s own without any ``TENURE_*`` variable
(``TENURE_URL`` may hold the store's password) or any variable whose value holds the store
URL's secrets (as they are, or percent-encoded as in a copy of the URL), plus the three
variables above: secrets never leave tenure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from urllib.parse import unquote, unquote_plus

import tenure
from tenure.cli import exits
from tenure.cli.commands import refuse_unknown
from tenure.cli.signals import Interrupts
from tenure.core.options import parse_url

TICK = 0.05  # how often the lease and the command are looked at
COMPLETE_RETRY = 0.2  # between attempts to complete while the store cannot be reached
SHORT_SECRET = 8  # a secret shorter than this is looked for only where a URL or option puts it
# Variables through which a store client may take the store's password without the URL.
_CLIENT_SECRETS = ("PGPASSWORD",)


def cmd_run(store: tenure.Store, args: argparse.Namespace) -> int:
    argv = list(args.cmd)
    if not argv:
        raise tenure.InvalidArgument("run needs a command after --: tenure run JOB --owner O --ttl S -- CMD ...")
    refuse_unknown(store, args)
    supervisor = Supervisor(argv, args.grace, command_env(os.environ, args.url))
    with supervisor.interrupts.catching():  # from before the claim: a signal while claiming is not lost
        if args.wait:  # said only if the job is held: a claim that needs no wait says nothing of one
            supervisor.interrupts.announce = f"tenure run: waiting up to {args.wait:g} s for {args.job_id!r}"
        try:
            held = supervisor.claim(lambda wait: store.hold(args.job_id, args.owner, args.ttl, wait=wait),
                                    args.wait or 0.0)
        except tenure.JobCompleted:
            print(f"tenure run: {args.job_id!r} is already completed; not running the command", file=sys.stderr)
            return exits.OK
        except tenure.AlreadyClaimed as exc:
            print(f"tenure run: {exc}; not running the command", file=sys.stderr)
            return exits.TEMPFAIL
        if held is None:
            return supervisor.interrupted()
        with held:
            return supervisor.run(held)


def command_env(environ: Mapping[str, str], url: str) -> dict[str, str]:
    """The command's environment without tenure's own variables or anything holding a secret
    of the store URL (the three ``TENURE_*`` of the lease are added by ``Supervisor.run``)."""
    secrets = parse_url(url).secrets()
    return {name: value for name, value in environ.items()
            if not name.startswith("TENURE_") and name not in _CLIENT_SECRETS
            and not any(_holds(value, secret) for secret in secrets)}


def _holds(value: str, secret: str) -> bool:
    # In a copy of a URL the secret is percent-encoded ("p%40ss" for "p@ss"), as it must be
    # there whatever the hex case, and in a query "+" stands for a space: decoded, it shows.
    return any(_shows(form, secret) for form in {value, unquote(value), unquote_plus(value)})


def _shows(value: str, secret: str) -> bool:
    # A short password ("pw") would match half the environment (PATH, HOME ...): looked for
    # whole, in a URL's user part or as an option's value.
    if len(secret) >= SHORT_SECRET:
        return secret in value
    return value == secret or f":{secret}@" in value or f"={secret}" in value


class Supervisor:
    """Runs one command under one held lease and decides what becomes of the job."""

    def __init__(self, argv: list[str], grace: float, env: dict[str, str]) -> None:
        self.argv = argv
        self.grace = grace
        self.env = env
        self.interrupts = Interrupts(self._on_signal)
        self.proc: subprocess.Popen[bytes] | None = None
        self._killer: threading.Timer | None = None

    @property
    def signalled(self) -> int | None:
        return self.interrupts.signalled

    def claim(self, hold: Callable[[float | None], tenure.HeldLease], wait: float) -> tenure.HeldLease | None:
        """Claim, waiting up to ``wait`` seconds; None if a signal came first (a lease claimed
        meanwhile is released)."""
        return self.interrupts.claim(hold, wait, lambda held: held.release())

    def interrupted(self) -> int:
        assert self.signalled is not None
        print(f"tenure run: signal {self.signalled} before the command started; not running it", file=sys.stderr)
        return 128 + self.signalled

    def run(self, held: tenure.HeldLease) -> int:
        env = {**self.env, "TENURE_JOB": held.job_id, "TENURE_TOKEN": str(held.token), "TENURE_OWNER": held.owner}
        try:
            proc = subprocess.Popen(self.argv, env=env, start_new_session=True)
        except OSError as exc:
            print(f"tenure run: cannot run {self.argv[0]!r}: {exc.strerror}", file=sys.stderr)
            held.release()
            return 127 if isinstance(exc, FileNotFoundError) else 126
        self.proc = proc
        if self.signalled is not None:  # a signal landed while the command was being started
            self._pass_on(self.signalled)
        try:
            return self._supervise(held, proc)
        finally:
            if self._killer is not None:
                self._killer.cancel()

    def _supervise(self, held: tenure.HeldLease, proc: subprocess.Popen[bytes]) -> int:
        while True:
            try:
                status = proc.wait(TICK)
                break
            except subprocess.TimeoutExpired:
                pass
            if _lost(held):
                reason = held.lost_reason or "the safe deadline passed"
                print(f"tenure run: lease on {held.job_id!r} (token {held.token}) lost: {reason}; "
                      "stopping the command", file=sys.stderr, flush=True)
                self._stop(proc, signal.SIGTERM)
                return exits.TEMPFAIL
        if self.signalled is not None:
            held.release()
            return 128 + self.signalled
        if status != 0:
            held.release()
            return status if status > 0 else 128 - status
        if _lost(held):
            print(f"tenure run: the command finished, but the lease on {held.job_id!r} was lost "
                  "before it did; not completing", file=sys.stderr)
            return exits.TEMPFAIL
        return self._complete(held)

    @staticmethod
    def _complete(held: tenure.HeldLease) -> int:
        """Complete the job, retrying while the store cannot be reached and the lease lives:
        the command succeeded, and a release on the way out would make it run again."""
        while True:
            try:
                held.complete(json.dumps({"exit_status": 0}))
                return exits.OK
            except tenure.BackendUnavailable as exc:
                if _lost(held):
                    print(f"tenure run: completing {held.job_id!r} failed and the lease was lost: {exc}",
                          file=sys.stderr)
                    return exits.TEMPFAIL
                print(f"tenure run: completing {held.job_id!r} failed, retrying: {exc}", file=sys.stderr, flush=True)
                time.sleep(COMPLETE_RETRY)
            except tenure.LeaseError as exc:
                print(f"tenure run: completing {held.job_id!r} failed: {exc}", file=sys.stderr)
                return exits.TEMPFAIL

    def _stop(self, proc: subprocess.Popen[bytes], signum: int) -> None:
        """Signal the process group; SIGKILL it if the command outlives the grace period."""
        _signal_group(proc, signum)
        try:
            proc.wait(self.grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()

    def _on_signal(self, signum: int) -> None:
        if self.proc is not None:
            self._pass_on(signum)

    def _pass_on(self, signum: int) -> None:
        """Signal the command's group; the first time, SIGKILL it after the grace period."""
        assert self.proc is not None
        _signal_group(self.proc, signum)
        if self._killer is None:
            self._killer = threading.Timer(self.grace, _kill_if_alive, (self.proc,))
            self._killer.daemon = True  # never keeps tenure run alive after the command ended
            self._killer.start()


def _lost(held: tenure.HeldLease) -> bool:
    return held.lost.is_set() or held.remaining() <= 0


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)  # the command's own group: its children too


def _kill_if_alive(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        _signal_group(proc, signal.SIGKILL)
