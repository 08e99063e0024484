"""``tenure run JOB -- CMD``: run a command while holding the job's lease.

Like ``etcdctl lock`` and ``consul lock``, with a fencing token and an audit. The command runs
in its own process group with ``TENURE_JOB``, ``TENURE_TOKEN`` and ``TENURE_OWNER`` set; the
lease is renewed in the background while it runs. "The command's processes" below are every
process it started, directly or not, whatever group or session it moved to: on Linux
``tenure run`` is a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``), so an orphan among
them (a double fork, a daemon) is re-parented to it rather than to init, and it finds them all
in ``/proc`` and reaps the dead. Stopping them means SIGTERM (and SIGCONT) to each, then
SIGKILL to each still alive ``--grace`` seconds later. Outcomes:

- the command exits 0: the job is completed (its result records the exit status); exit 0;
- it exits non-zero or is killed: the job fails (``HeldLease.fail``, error ``exit status N``
  or ``killed by signal NAME``): it is retried after the store's backoff (``--retry-in`` to
  choose), or parked if that was its last attempt; exit with its status (128 + signal number
  when a signal ended it);
- it exits (0 or not) leaving processes running: they are stopped first, then the job is
  completed or fails as above;
- the job is already completed: the command does not run; exit 0, so a scheduler can rerun;
- the job is held elsewhere, or scheduled (claimable later): exit 75 at once, or after
  ``--wait`` seconds of waiting;
- the job is parked (it used its ``max_attempts``): the command does not run; exit 65 (the
  store refused: it is not claimed again until an operator requeues it);
- the lease is lost while it runs (a renewal refused, or the safe deadline passed): the
  command's processes are stopped; the job is left to expire, its attempt counted; exit 75;
- SIGINT, SIGTERM, SIGHUP or SIGQUIT to ``tenure run``: the command's processes are stopped,
  the signal itself going to each of them first (SIGQUIT as SIGTERM: its default action dumps
  core); the job is released (the attempt given back: the command was stopped, it did not
  fail); exit 128 + that signal's number. One that arrives before the
  command started (while claiming or waiting) is not lost: the command does not run, a lease
  already claimed is released, exit 128 + its number.

``--max-attempts N`` is the limit of a job the claim creates (the store's ``max_attempts``
option for this one claim, so the job is created with it atomically); a job submitted before
keeps the limit its submit gave it (``tenure submit --max-attempts``).

The job is neither completed, failed nor released, and ``tenure run`` does not exit, while any of the
command's processes runs; the lease is renewed meanwhile. A process still alive ``KILL_WAIT``
(5) seconds after SIGKILL (uninterruptible sleep, ``D``, say, or another user's) is named
with its pid and command name; the job is then neither completed nor released (its lease runs
out by its TTL), exit 75. Not guaranteed: without ``/proc`` or the prctl (not Linux) only the
command's process group is signalled and only the command itself is waited for; after a lost
lease the store may grant the job to another holder while the processes are being stopped
(fencing with ``$TENURE_TOKEN`` is what makes their late writes harmless); a process in ``D``
state can finish the system call it is in after the job was given up.

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
import time
from collections.abc import Callable, Mapping
from urllib.parse import unquote, unquote_plus

import tenure
from tenure.cli import exits, processes
from tenure.cli.commands import refuse_unknown
from tenure.cli.signals import Interrupts
from tenure.cli.stopping import KILL_WAIT, Stop
from tenure.core.options import parse_url

TICK = 0.05  # how often the lease and the command are looked at
REAP_EVERY = 1.0  # how often, while the command runs, the orphans it left are reaped
COMPLETE_RETRY = 0.2  # between attempts to complete while the store cannot be reached
SHORT_SECRET = 8  # a secret shorter than this is looked for only where a URL or option puts it
# What a signal to ``tenure run`` becomes for the command: SIGQUIT's default action dumps core.
PASSED_ON: dict[int, int] = {signal.SIGQUIT: signal.SIGTERM}
# Variables through which a store client may take the store's password without the URL.
_CLIENT_SECRETS = ("PGPASSWORD",)


def cmd_run(store: tenure.Store, args: argparse.Namespace) -> int:
    argv = list(args.cmd)
    if not argv:
        raise tenure.InvalidArgument("run needs a command after --: tenure run JOB --owner O --ttl S -- CMD ...")
    refuse_unknown(store, args)
    supervisor = Supervisor(argv, args.grace, command_env(os.environ, args.url), getattr(args, "retry_in", None))
    with supervisor.interrupts.catching():  # from before the claim: a signal while claiming is not lost
        if args.wait:  # said only if the job is held: a claim that needs no wait says nothing of one
            supervisor.interrupts.announce = f"tenure run: waiting up to {args.wait:g} s for {args.job_id!r}"
        try:
            held = supervisor.claim(lambda wait: store.hold(args.job_id, args.owner, args.ttl, wait=wait),
                                    args.wait or 0.0)
        except tenure.JobCompleted:
            print(f"tenure run: {args.job_id!r} is already completed; not running the command", file=sys.stderr)
            return exits.OK
        except tenure.AlreadyClaimed as exc:  # held elsewhere, or scheduled (JobScheduled): later
            print(f"tenure run: {exc}; not running the command", file=sys.stderr)
            return exits.TEMPFAIL
        except tenure.JobParked as exc:  # not by waiting: an operator must requeue it
            print(f"tenure run: {exc}; not running the command", file=sys.stderr)
            return exits.REFUSED
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

    def __init__(self, argv: list[str], grace: float, env: dict[str, str], retry_in: float | None = None) -> None:
        self.argv = argv
        self.grace = grace
        self.env = env
        self.retry_in = retry_in  # after the command failed; None: the store's backoff
        self.interrupts = Interrupts()
        self._lost_while_running = False

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
        with processes.subreaper():  # orphans of the command become ours, so none is missed
            tree = processes.Descendants()
            try:
                proc = subprocess.Popen(self.argv, env=env, start_new_session=True)
            except OSError as exc:
                print(f"tenure run: cannot run {self.argv[0]!r}: {exc.strerror}", file=sys.stderr)
                held.release()
                return 127 if isinstance(exc, FileNotFoundError) else 126
            if not self._watch(held, proc, tree):
                held.lost.set()  # not released: the lease must run out by its TTL (see _watch)
                return exits.TEMPFAIL
        return self._outcome(held, proc.returncode)

    def _watch(self, held: tenure.HeldLease, proc: subprocess.Popen[bytes], tree: processes.Descendants) -> bool:
        """Until the command and every process it started have ended (stopping them if the lease
        is lost, a signal came, or the command left some behind); False if some could not be."""
        stop: Stop | None = None
        reaped_at = time.monotonic()
        while True:
            status = proc.poll()
            if stop is None:
                stop = self._stop_needed(held, proc, status, tree)
            if stop is None and status is None:
                if time.monotonic() - reaped_at >= REAP_EVERY:  # a walk of /proc costs ~10 ms
                    tree.living(reap_except=proc.pid)
                    reaped_at = time.monotonic()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(TICK)
                continue
            living = self._living(proc, tree)
            if not living and status is not None:
                return True
            if stop is not None and (left := stop.step(living)):
                print(f"tenure run: {len(left)} process(es) of the command could not be stopped ({self.grace:g} s "
                      f"after SIGTERM, {KILL_WAIT:g} s after SIGKILL): {', '.join(map(str, left))}; the job is "
                      "neither released nor completed, its lease runs out by its TTL", file=sys.stderr, flush=True)
                return False
            with contextlib.suppress(subprocess.TimeoutExpired):
                if status is None:
                    proc.wait(TICK)
                else:
                    time.sleep(TICK)  # processes the command left: looked at again every TICK

    def _living(self, proc: subprocess.Popen[bytes], tree: processes.Descendants) -> list[processes.Process]:
        if processes.visible():
            return tree.living(reap_except=proc.pid)  # subprocess reaps the command itself
        alive = proc.returncode is None  # without /proc: the command itself, its group is signalled
        return [processes.Process(proc.pid, tree.root, self.argv[0], "R")] if alive else []

    def _stop_needed(self, held: tenure.HeldLease, proc: subprocess.Popen[bytes], status: int | None,
                     tree: processes.Descendants) -> Stop | None:
        """A Stop if the command's processes must be stopped now, saying why."""
        group = None if processes.visible() else proc.pid  # /proc shows every process, in any group
        if self.signalled is not None:
            return Stop(PASSED_ON.get(self.signalled, self.signalled), self.grace, group)
        if _lost(held):
            self._lost_while_running = True
            reason = held.lost_reason or "the safe deadline passed"
            print(f"tenure run: lease on {held.job_id!r} (token {held.token}) lost: {reason}; "
                  "stopping the command", file=sys.stderr, flush=True)
            return Stop(signal.SIGTERM, self.grace, group)
        if status is not None and (left := self._living(proc, tree)):
            then = "completing" if status == 0 else "failing"
            print(f"tenure run: the command {_ended(status)} and left {len(left)} process(es) running: "
                  f"{', '.join(map(str, left))}; stopping them before {then} the job", file=sys.stderr, flush=True)
            return Stop(signal.SIGTERM, self.grace, group)
        return None

    def _outcome(self, held: tenure.HeldLease, status: int) -> int:
        """What becomes of the job once nothing of the command runs any more."""
        if self._lost_while_running:
            return exits.TEMPFAIL
        if self.signalled is not None:
            held.release()
            return 128 + self.signalled
        if status != 0:
            return self._fail(held, status)
        if _lost(held):
            print(f"tenure run: the command finished, but the lease on {held.job_id!r} was lost "
                  "before it did; not completing", file=sys.stderr)
            return exits.TEMPFAIL
        return exits.OK if _finish(held, "completing", lambda: held.complete(json.dumps({"exit_status": 0}))) \
            else exits.TEMPFAIL

    def _fail(self, held: tenure.HeldLease, status: int) -> int:
        """Record the command's failure: the job is retried after the backoff, or parked on its
        last attempt. The command's status is the exit status whether or not it was recorded:
        a failure that did not land leaves the lease to run out, which keeps the attempt too."""
        error = failure(status)
        if _lost(held):
            print(f"tenure run: the command failed ({error}), but the lease on {held.job_id!r} was lost "
                  "before it did; the job is left to expire (its attempt counts)", file=sys.stderr)
            held.lost.set()  # not released: a release would give the attempt back
        elif not _finish(held, "failing", lambda: held.fail(error, retry_in=self.retry_in)):
            held.lost.set()  # likewise
        return status if status > 0 else 128 - status


def _finish(held: tenure.HeldLease, doing: str, call: Callable[[], None]) -> bool:
    """Complete or fail the job, retrying while the store cannot be reached and the lease lives
    (a release on the way out would make a succeeded command run again, and give a failed
    one's attempt back); False, said on stderr, if it could not be done."""
    while True:
        try:
            call()
            return True
        except tenure.BackendUnavailable as exc:
            if _lost(held):
                print(f"tenure run: {doing} {held.job_id!r} failed and the lease was lost: {exc}", file=sys.stderr)
                return False
            print(f"tenure run: {doing} {held.job_id!r} failed, retrying: {exc}", file=sys.stderr, flush=True)
            time.sleep(COMPLETE_RETRY)
        except tenure.LeaseError as exc:
            print(f"tenure run: {doing} {held.job_id!r} failed: {exc}", file=sys.stderr)
            return False


def _ended(status: int) -> str:
    """How the command ended, in words: ``subprocess`` gives a signal's death as its negative."""
    if status >= 0:
        return f"exited with status {status}"
    name = _signal_name(-status)
    return f"was killed by {name}" if name.startswith("SIG") else f"was killed by signal {name}"


def failure(status: int) -> str:
    """The error a failed command's job records: ``exit status N`` or ``killed by signal NAME``."""
    return f"exit status {status}" if status >= 0 else f"killed by signal {_signal_name(-status)}"


def _signal_name(number: int) -> str:
    with contextlib.suppress(ValueError):
        return signal.Signals(number).name
    return str(number)


def _lost(held: tenure.HeldLease) -> bool:
    return held.lost.is_set() or held.remaining() <= 0
