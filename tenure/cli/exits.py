"""Exit statuses of ``tenure``, after BSD's sysexits.h so schedulers and shells can act on them."""

from __future__ import annotations

from tenure.core.errors import (
    AlreadyClaimed,
    BackendUnavailable,
    InvalidArgument,
    JobCompleted,
    JobNotFound,
    JobParked,
    LeaseError,
    StaleLease,
    StoreNotFound,
    TokenChanged,
    TokensExhausted,
)
from tenure.core.records import Reason

OK = 0
USAGE = 64  # EX_USAGE: a malformed command line or invalid input (nothing was written)
REFUSED = 65  # EX_DATAERR: the store refused: stale lease, already claimed or scheduled, completed, parked,
# token changed, no token left
NOTHING = 66  # EX_NOINPUT: nothing to claim or to end, no such job, or no such store (create=false)
UNAVAILABLE = 69  # EX_UNAVAILABLE: the store cannot be reached, timed out or refused the credentials,
# or an extra a command needs is not installed, or a server of tenure's cannot start
SOFTWARE = 70  # EX_SOFTWARE: anything else (a corrupt record, a lease lost outside ``run``)
TEMPFAIL = 75  # EX_TEMPFAIL: ``run`` did not finish its command under the lease; try again later
INTERRUPTED = 130  # Ctrl-C

HELP = f"""exit status:
  {OK:<4} success ("run": the command exited 0, or the job was already completed)
  {USAGE:<4} invalid usage or input; nothing was written
  {REFUSED:<4} the store refused: stale lease, already claimed, job scheduled (claimable later),
       job completed, job parked (it used its attempts; "run" too: an operator must requeue
       it), token changed, no token left to issue
  {NOTHING:<4} nothing to claim, nothing to end ("expire": no live lease), no such job, or
       no such store (a SQLite file, PostgreSQL schema or ZooKeeper root not there)
  {UNAVAILABLE:<4} the store cannot be reached (or refused the credentials), an extra is not
       installed, or "metrics" or "dashboard" cannot serve (its port in use)
  {SOFTWARE:<4} a record tenure cannot read, or another error
  {TEMPFAIL:<4} "run": the job is held elsewhere or scheduled, the lease was lost while the command ran, or
       a process of the command could not be stopped (alive 5 s after SIGKILL)
  N    "run": the command's own non-zero status (128+signal if a signal ended it), the job failed
       (retried after a backoff, or parked on its last attempt); 128+signal
       when Ctrl-C, SIGTERM, SIGHUP or SIGQUIT stopped "run" itself
"""


def for_error(exc: LeaseError) -> int:
    """The status for an error that ends a command."""
    if isinstance(exc, InvalidArgument):
        return USAGE
    if isinstance(exc, (JobNotFound, StoreNotFound)) or (
            isinstance(exc, StaleLease) and exc.rejection.reason == Reason.NOT_FOUND):
        return NOTHING
    if isinstance(exc, (StaleLease, AlreadyClaimed, JobCompleted, JobParked, TokenChanged, TokensExhausted)):
        return REFUSED
    if isinstance(exc, BackendUnavailable):
        return UNAVAILABLE
    return SOFTWARE
