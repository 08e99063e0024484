"""``tenure``: the command line. Human tables by default, ``-o json`` or ``-o jsonl`` for scripts.

    tenure --url sqlite:///jobs.db submit job-42
    TOKEN=$(tenure --url sqlite:///jobs.db claim job-42 --owner me --ttl 30)
    tenure --url sqlite:///jobs.db complete job-42 --owner me --token "$TOKEN" --result done
    tenure --url sqlite:///jobs.db run nightly --owner cron --ttl 60 -- ./nightly.sh
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from tenure.cli import commands, exits, stores
from tenure.cli.arguments import (
    COUNT,
    DELAY,
    ERROR,
    GRACE,
    INTERVAL,
    JOB_ID,
    LIMIT,
    MAX_ATTEMPTS,
    OFFSET,
    OWNER,
    PAGE_LIMIT,
    RETRY_IN,
    SINCE,
    TOKEN,
    TTL,
    WAIT,
    store_url,
)
from tenure.cli.format import OUTPUTS
from tenure.cli.run import cmd_run
from tenure.core.records import JobState

DEFAULT_URL = stores.DEFAULT_URL

Command = Callable[[Any, argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on a usage error; tenure's usage status is EX_USAGE (64)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(exits.USAGE, f"{self.prog}: error: {message}\n")


def _version() -> str:
    import tenure

    return f"tenure {tenure.__version__}"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tenure", description="Expiring job leases with fencing tokens.",
                     epilog=exits.HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=_version())
    parser.add_argument("--url", help=f"store URL (env TENURE_URL; default {DEFAULT_URL}); every user "
                                      "of the machine sees a password given here (ps): use --url-file")
    parser.add_argument("--url-file", metavar="PATH",
                        help="file holding the store URL, so that its password is in neither the command "
                             "line nor the environment (env TENURE_URL_FILE); refused if other users may read it")
    parser.add_argument("-o", "--output", choices=OUTPUTS, default="table",
                        help="table (default), json, or jsonl (one record per line)")
    parser.add_argument("--json", dest="output", action="store_const", const="json", help="same as -o json")
    # The same options after the command too (``tenure ls --json``); given there, they win.
    common = _Parser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help="store URL")
    common.add_argument("--url-file", metavar="PATH", default=argparse.SUPPRESS, help="file holding the store URL")
    common.add_argument("-o", "--output", choices=OUTPUTS, default=argparse.SUPPRESS, help="output form")
    common.add_argument("--json", dest="output", action="store_const", const="json", default=argparse.SUPPRESS,
                        help="same as -o json")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Command | None, text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text, parents=[common])
        p.set_defaults(func=func)
        return p

    def existing(p: argparse.ArgumentParser) -> None:
        p.add_argument("--existing", action="store_true",
                       help="only a job the store has: exit 66 rather than create JOB_ID")

    def waiting(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument("--wait", type=WAIT, metavar="SECONDS", help=f"block up to this long {what}")

    def attempts(p: argparse.ArgumentParser, which: str) -> None:
        p.add_argument("--max-attempts", type=MAX_ATTEMPTS, metavar="N",
                       help=f"claims {which} may have before it is parked (default: the store's max_attempts "
                            "option, else unlimited)")

    def retry_in(p: argparse.ArgumentParser) -> None:
        p.add_argument("--retry-in", type=RETRY_IN, metavar="SECONDS",
                       help="claimable again after this many seconds of store time (default: the store's "
                            "backoff: retry_base * retry_factor ** (attempts - 1), at most retry_max, jittered)")

    p = command("submit", commands.cmd_submit, "submit jobs (a completed job starts a new run; a pending, "
                "scheduled, leased or parked one is left as it is)")
    p.add_argument("job_ids", nargs="+", metavar="JOB_ID", type=JOB_ID)
    attempts(p, "each new run")
    p.add_argument("--delay", type=DELAY, default=0.0, metavar="SECONDS",
                   help="claimable only after this many seconds of store time (default 0)")
    p = command("claim", commands.cmd_claim,
                "claim a job, or the next claimable one without JOB_ID; prints the token. A JOB_ID the "
                "store does not have is created (--existing refuses it)")
    p.add_argument("job_id", nargs="?", metavar="JOB_ID", type=JOB_ID)
    existing(p)
    p.add_argument("--owner", required=True, type=OWNER)
    p.add_argument("--ttl", type=TTL, required=True, help="lease length in seconds")
    waiting(p, "while the job is held, or while nothing is claimable")
    for name, func, text in (("renew", commands.cmd_renew, "renew a lease"),
                             ("complete", commands.cmd_complete, "complete a job under a lease"),
                             ("release", commands.cmd_release, "give a job back unfinished")):
        p = command(name, func, text)
        p.add_argument("job_id", metavar="JOB_ID", type=JOB_ID)
        p.add_argument("--owner", required=True, type=OWNER)
        p.add_argument("--token", type=TOKEN, required=True, help="the lease's fencing token")
        if name == "renew":
            p.add_argument("--ttl", type=TTL, required=True)
        if name == "complete":
            p.add_argument("--result", help="text to store as the job's result")
    p = command("fail", commands.cmd_fail, "give a job back as failed under a lease: retried after a backoff, "
                "or parked if that was its last attempt")
    p.add_argument("job_id", metavar="JOB_ID", type=JOB_ID)
    p.add_argument("--owner", required=True, type=OWNER)
    p.add_argument("--token", type=TOKEN, required=True, help="the lease's fencing token")
    p.add_argument("--error", type=ERROR, metavar="TEXT", help="what went wrong, kept as the job's last error")
    retry_in(p)
    p = command("run", cmd_run, "hold a job's lease while a command runs; exit 75 if it cannot. A JOB_ID "
                "the store does not have is created (--existing refuses it)")
    p.add_argument("job_id", metavar="JOB_ID", type=JOB_ID)
    existing(p)
    p.add_argument("--owner", required=True, type=OWNER)
    p.add_argument("--ttl", type=TTL, required=True, help="lease length in seconds, renewed while CMD runs")
    waiting(p, "while the job is held elsewhere or scheduled (default: exit 75 at once)")
    p.add_argument("--grace", type=GRACE, default=10.0, metavar="SECONDS",
                   help="after SIGTERM, SIGKILL the command's processes this much later (default 10)")
    attempts(p, "a job this run creates")
    retry_in(p)
    p.usage = ("tenure run JOB_ID --owner OWNER --ttl SECONDS [--existing] [--wait SECONDS] [--grace SECONDS] "
               "[--max-attempts N] [--retry-in SECONDS] -- CMD [ARGS...]")
    p.epilog = ("CMD gets TENURE_JOB, TENURE_TOKEN and TENURE_OWNER. Exit 0: job completed. Non-zero: job "
                "failed (error 'exit status N' or 'killed by signal NAME'; retried after the backoff or "
                "--retry-in, parked after its last attempt), its status returned. Completed job: CMD not run, "
                "exit 0. Parked job: CMD not run, exit 65. Held elsewhere, scheduled, or lease lost: exit 75. On "
                "a lost lease or a signal (INT, TERM, HUP, QUIT), and for what CMD leaves "
                "running when it exits, every process CMD started gets SIGTERM (on a signal, that signal; QUIT as "
                "TERM), then SIGKILL after --grace; the "
                "job is neither completed, failed nor released while any of them runs.")
    p = command("expire", commands.cmd_expire,
                "end a job's lease now, if its token is still the one given (an operator action)")
    p.add_argument("job_id", metavar="JOB_ID", type=JOB_ID)
    p.add_argument("--token", type=TOKEN, required=True, help="the current token you confirmed")
    p.add_argument("--actor", type=OWNER, help="who asks, for the history (default: your login name)")
    p = command("requeue", commands.cmd_requeue,
                "make a parked, scheduled, pending or expired job pending again with its attempts reset (an "
                "operator action); a live lease must be ended first (expire)")
    p.add_argument("job_id", metavar="JOB_ID", type=JOB_ID)
    p.add_argument("--delay", type=DELAY, default=0.0, metavar="SECONDS",
                   help="claimable only after this many seconds of store time (default 0)")
    p.add_argument("--token", type=TOKEN, help="only if this is still the job's token (the one you confirmed)")
    p.add_argument("--actor", type=OWNER, help="who asks, for the history (default: your login name)")
    p = command("get", commands.cmd_get, "show one job")
    p.add_argument("job_id", metavar="JOB_ID", type=JOB_ID)
    p = command("ls", commands.cmd_ls, "list one page of jobs")
    p.add_argument("--state", action="append", choices=[s.value for s in JobState],
                   help="only jobs in this state (repeatable)")
    p.add_argument("--owner", help="only jobs whose owner contains this text")
    p.add_argument("--job", help="only jobs whose id contains this text")
    p.add_argument("--order", choices=["expiry", "job"], default="job", help="by job id (default) or expiry")
    p.add_argument("--offset", type=OFFSET, default=0)
    p.add_argument("--limit", type=PAGE_LIMIT, default=100, help="jobs per page, 1 to 1000 (default 100)")
    p = command("rejections", commands.cmd_rejections, "list audited rejections, oldest first")
    p.add_argument("--since", type=SINCE, help="store time in seconds since the epoch")
    p.add_argument("--limit", type=LIMIT, help="only the most recent N")
    p.add_argument("--job", metavar="JOB_ID", type=JOB_ID,
                   help="only this job's (through an index where the store has one)")
    p = command("history", commands.cmd_history, "list accepted operations, oldest first")
    p.add_argument("job_id", nargs="?", metavar="JOB_ID", type=JOB_ID)
    p.add_argument("--limit", type=LIMIT, help="only the most recent N")
    p = command("watch", commands.cmd_watch, "print every job, then each change and new rejection, until Ctrl-C")
    p.add_argument("--interval", type=INTERVAL, default=1.0, help="poll interval where the store has no watch")
    p.add_argument("--count", type=COUNT, help="stop after this many changes")
    command("health", commands.cmd_health, "show facts about the store; exit 69 if it cannot be reached")
    command("build-indexes", commands.cmd_build_indexes,
            "give an etcd or ZooKeeper store written by an older tenure its query indexes (an upgrade)")
    p = command("metrics", None, "serve Prometheus metrics of the store at http://HOST:PORT/metrics")
    from tenure.cli import metrics

    metrics.add_arguments(p)
    p.set_defaults(run=metrics.run)

    p = command("demo", None, "run the demo: workers, a paused worker, a rejected stale completion")
    from tenure.cli import demo

    demo.add_arguments(p)
    p.set_defaults(run=demo.run)
    p = command("dashboard", None, "serve the operations dashboard")
    try:
        from tenure.dashboard import launcher
    except ImportError:  # the dashboard extra is not installed; say so when it is used
        p.set_defaults(run=_no_dashboard)
    else:
        launcher.add_arguments(p)
        p.set_defaults(run=launcher.run)
    return parser


def _no_dashboard(args: argparse.Namespace) -> int:
    print("tenure: the dashboard needs Streamlit: pip install 'tenure[dashboard]'", file=sys.stderr)
    return exits.UNAVAILABLE  # as a store whose extra is missing


def _split_command(words: list[str]) -> tuple[list[str], list[str]]:
    """``tenure ... run JOB ... -- CMD ARGS``: what argparse parses, and the command to run.

    argparse cannot leave a command's own options alone after a positional argument, so the
    command is cut off at the first ``--`` after ``run`` before parsing.
    """
    if "--" in words and "run" in words[:words.index("--")]:
        cut = words.index("--")
        return words[:cut], words[cut + 1:]
    return words, []


def main(argv: Sequence[str] | None = None) -> int:
    import tenure

    words = list(sys.argv[1:] if argv is None else argv)
    head, command = _split_command(words)
    try:
        args = build_parser().parse_args(head)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else exits.USAGE
    args.cmd = command
    try:
        args.url = store_url(args.url, args.url_file, os.environ, DEFAULT_URL)
        refused = stores.opened(args)
        if refused is not None:
            return refused
        if args.func is None:
            code: int = args.run(args)
            return code
        with tenure.connect(args.url, **stores.connect_options(args)) as store:
            status: int = args.func(store, args)
            return status
    except tenure.LeaseError as exc:
        print(f"tenure: {type(exc).__name__}: {exc}", file=sys.stderr)
        return exits.for_error(exc)
    except KeyboardInterrupt:
        return exits.INTERRUPTED
