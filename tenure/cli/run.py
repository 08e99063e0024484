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
  ``--grace`` if it outlives it), the job is released, exit 128 + that signal's number.
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
from types import FrameType
from typing import Any

import tenure
from tenure.cli import exits

TICK = 0.05  # how often the lease and the command are looked at
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def cmd_run(store: tenure.Store, args: argparse.Namespace) -> int:
    argv = list(args.cmd)
    if not argv:
        raise tenure.InvalidArgument("run needs a command after --: tenure run JOB --owner O --ttl S -- CMD ...")
    if args.grace < 0:
        raise tenure.InvalidArgument(f"--grace must be >= 0 seconds, got {args.grace}")
    if args.wait:
        print(f"tenure run: waiting up to {args.wait:g} s for {args.job_id!r}", file=sys.stderr, flush=True)
    try:
        held = store.hold(args.job_id, args.owner, args.ttl, wait=args.wait)
    except tenure.JobCompleted:
        print(f"tenure run: {args.job_id!r} is already completed; not running the command", file=sys.stderr)
        return exits.OK
    except tenure.AlreadyClaimed as exc:
        print(f"tenure run: {exc}; not running the command", file=sys.stderr)
        return exits.TEMPFAIL
    with held:
        return Supervisor(held, argv, args.grace).run()


class Supervisor:
    """Runs one command under one held lease and decides what becomes of the job."""

    def __init__(self, held: tenure.HeldLease, argv: list[str], grace: float) -> None:
        self.held = held
        self.argv = argv
        self.grace = grace
        self.signalled: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def run(self) -> int:
        env = {**os.environ, "TENURE_JOB": self.held.job_id, "TENURE_TOKEN": str(self.held.token),
               "TENURE_OWNER": self.held.owner}
        previous = self._forward_signals()
        try:
            try:
                self.proc = subprocess.Popen(self.argv, env=env, start_new_session=True)
            except OSError as exc:
                print(f"tenure run: cannot run {self.argv[0]!r}: {exc.strerror}", file=sys.stderr)
                self.held.release()
                return 127 if isinstance(exc, FileNotFoundError) else 126
            if self.signalled is not None:  # a signal landed before the command had a pid
                _signal_group(self.proc, self.signalled)
            return self._supervise(self.proc)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _supervise(self, proc: subprocess.Popen[bytes]) -> int:
        while True:
            try:
                status = proc.wait(TICK)
                break
            except subprocess.TimeoutExpired:
                pass
            if self._lost():
                reason = self.held.lost_reason or "the safe deadline passed"
                print(f"tenure run: lease on {self.held.job_id!r} (token {self.held.token}) lost: {reason}; "
                      "stopping the command", file=sys.stderr, flush=True)
                self._stop(proc, signal.SIGTERM)
                return exits.TEMPFAIL
        if self.signalled is not None:
            self.held.release()
            return 128 + self.signalled
        if status != 0:
            self.held.release()
            return status if status > 0 else 128 - status
        if self._lost():
            print(f"tenure run: the command finished, but the lease on {self.held.job_id!r} was lost "
                  "before it did; not completing", file=sys.stderr)
            return exits.TEMPFAIL
        try:
            self.held.complete(json.dumps({"exit_status": 0}))
        except tenure.LeaseError as exc:
            print(f"tenure run: completing {self.held.job_id!r} failed: {exc}", file=sys.stderr)
            return exits.TEMPFAIL
        return exits.OK

    def _lost(self) -> bool:
        return self.held.lost.is_set() or self.held.remaining() <= 0

    def _stop(self, proc: subprocess.Popen[bytes], signum: int) -> None:
        """Signal the process group; SIGKILL it if the command outlives the grace period."""
        _signal_group(proc, signum)
        try:
            proc.wait(self.grace)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait()

    def _forward_signals(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}  # only the main thread may set handlers (tenure run called in-process)
        return {signum: signal.signal(signum, self._on_signal) for signum in FORWARDED}

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        first = self.signalled is None
        self.signalled = signum
        if self.proc is None:
            return
        _signal_group(self.proc, signum)
        if first:
            timer = threading.Timer(self.grace, _kill_if_alive, (self.proc,))
            timer.daemon = True  # never keeps tenure run alive after the command ended
            timer.start()


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)  # the command's own group: its children too


def _kill_if_alive(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        _signal_group(proc, signal.SIGKILL)
