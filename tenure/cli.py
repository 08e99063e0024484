"""``tenure``: the command line. Human tables by default, ``--json`` for scripts.

    tenure --url sqlite:///jobs.db submit job-42
    tenure claim job-42 --owner me --ttl 30
    tenure complete job-42 --owner me --token 7 --result done
    tenure ls --state leased
    tenure rejections --limit 20 --json
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import enum
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tenure.cli_format import table, when

DEFAULT_URL = "sqlite:///tenure-demo.db"


def _plain(value: Any) -> Any:
    """A JSON-friendly copy of a record."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _emit(args: argparse.Namespace, value: Any, human: Callable[[], str]) -> None:
    print(json.dumps(_plain(value), indent=2, ensure_ascii=False) if args.json else human())


# -- commands -------------------------------------------------------------------------------
def _lease(args: argparse.Namespace) -> Any:
    import tenure

    return tenure.Lease(args.job_id, args.owner, args.token, 0.0, getattr(args, "ttl", None) or 1.0)


def cmd_submit(store: Any, args: argparse.Namespace) -> None:
    for job_id in args.job_ids:
        store.submit(job_id)
    _emit(args, {"submitted": args.job_ids}, lambda: f"submitted {len(args.job_ids)} job(s)")


def cmd_claim(store: Any, args: argparse.Namespace) -> None:
    if args.job_id is None:
        lease = store.claim_next(args.owner, args.ttl)
        if lease is None:
            _emit(args, None, lambda: "nothing to claim")
            return
    else:
        lease = store.claim(args.job_id, args.owner, args.ttl)
    now = store.now()
    _emit(args, lease, lambda: f"claimed {lease.job_id!r}: token {lease.token}, "
                               f"expires {when(lease.expires_at, now)}")


def cmd_renew(store: Any, args: argparse.Namespace) -> None:
    lease = store.renew(_lease(args), args.ttl)
    now = store.now()
    _emit(args, lease, lambda: f"renewed {lease.job_id!r} (token {lease.token}): "
                               f"expires {when(lease.expires_at, now)}")


def cmd_complete(store: Any, args: argparse.Namespace) -> None:
    store.complete(_lease(args), args.result)
    _emit(args, {"completed": args.job_id, "token": args.token},
          lambda: f"completed {args.job_id!r} (token {args.token})")


def cmd_release(store: Any, args: argparse.Namespace) -> None:
    store.release(_lease(args))
    _emit(args, {"released": args.job_id, "token": args.token},
          lambda: f"released {args.job_id!r} (token {args.token})")


def cmd_get(store: Any, args: argparse.Namespace) -> None:
    status = store.get(args.job_id)
    if status is None:
        raise _NotFound(args.job_id)
    now = store.now()
    _emit(args, status, lambda: "\n".join(
        f"{f.name:>13}: {when(v, now) if f.name.endswith('_at') else ('-' if v is None else v)}"
        for f in dataclasses.fields(status) if (v := getattr(status, f.name)) is not None or f.name == "owner"))


def cmd_ls(store: Any, args: argparse.Namespace) -> None:
    jobs = [j for j in store.jobs() if args.state is None or j.state.value == args.state]
    now = store.now()
    _emit(args, jobs, lambda: table(
        ["job", "state", "owner", "token", "expires", "runs"],
        [(j.job_id, j.state.value, j.owner, j.token, when(j.expires_at, now), j.runs) for j in jobs]))


def cmd_rejections(store: Any, args: argparse.Namespace) -> None:
    records = store.rejections(since=args.since, limit=args.limit)
    now = store.now()
    _emit(args, records, lambda: table(
        ["at", "job", "op", "owner", "token", "current owner", "current token", "kind", "reason"],
        [(when(r.at, now), r.job_id, r.op.value, r.owner, r.token, r.current_owner, r.current_token,
          r.kind.value, r.reason) for r in records]))


def cmd_history(store: Any, args: argparse.Namespace) -> None:
    events = store.history(args.job_id, limit=args.limit)
    now = store.now()
    _emit(args, events, lambda: table(
        ["at", "job", "op", "owner", "token", "expires"],
        [(when(e.at, now), e.job_id, e.op.value, e.owner, e.token, when(e.expires_at, now)) for e in events]))


class _NotFound(Exception):
    pass


# -- parsing ----------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tenure", description="Expiring job leases with fencing tokens.")
    parser.add_argument("--url", default=os.environ.get("TENURE_URL", DEFAULT_URL),
                        help=f"store URL (env TENURE_URL; default {DEFAULT_URL})")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")
    # The same options after the command too (``tenure ls --json``); given there, they win.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help="store URL")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func: Callable[[Any, argparse.Namespace], None], text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text, parents=[common])
        p.set_defaults(func=func)
        return p

    p = command("submit", cmd_submit, "submit jobs (a completed job starts a new run)")
    p.add_argument("job_ids", nargs="+", metavar="JOB_ID")
    p = command("claim", cmd_claim, "claim a job, or the next claimable one without JOB_ID")
    p.add_argument("job_id", nargs="?", metavar="JOB_ID")
    p.add_argument("--owner", required=True)
    p.add_argument("--ttl", type=float, required=True, help="lease length in seconds")
    for name, func, text in (("renew", cmd_renew, "renew a lease"),
                             ("complete", cmd_complete, "complete a job under a lease"),
                             ("release", cmd_release, "give a job back unfinished")):
        p = command(name, func, text)
        p.add_argument("job_id", metavar="JOB_ID")
        p.add_argument("--owner", required=True)
        p.add_argument("--token", type=int, required=True, help="the lease's fencing token")
        if name == "renew":
            p.add_argument("--ttl", type=float, required=True)
        if name == "complete":
            p.add_argument("--result", help="text to store as the job's result")
    p = command("get", cmd_get, "show one job")
    p.add_argument("job_id", metavar="JOB_ID")
    p = command("ls", cmd_ls, "list jobs")
    p.add_argument("--state", choices=["pending", "leased", "expired", "completed", "corrupt"])
    p = command("rejections", cmd_rejections, "list audited rejections, oldest first")
    p.add_argument("--since", type=float, help="store time in seconds since the epoch")
    p.add_argument("--limit", type=int, help="only the most recent N")
    p = command("history", cmd_history, "list accepted operations, oldest first")
    p.add_argument("job_id", nargs="?", metavar="JOB_ID")
    p.add_argument("--limit", type=int)

    p = sub.add_parser("demo", help="run the demo: workers, a paused worker, a rejected stale completion",
                       parents=[common])
    from tenure import demo

    demo.add_arguments(p)
    p.set_defaults(func=None, run=demo.run)
    p = sub.add_parser("dashboard", help="serve the operations dashboard", parents=[common])
    try:
        from tenure.dashboard import launcher
    except ImportError:  # the dashboard extra is not installed; say so when it is used
        p.set_defaults(func=None, run=_no_dashboard)
    else:
        launcher.add_arguments(p)
        p.set_defaults(func=None, run=launcher.run)
    return parser


def _no_dashboard(args: argparse.Namespace) -> int:
    print("tenure: the dashboard needs Streamlit: pip install 'tenure[dashboard]'", file=sys.stderr)
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    import tenure

    args = build_parser().parse_args(argv)
    try:
        if args.func is None:
            code: int = args.run(args)
            return code
        with tenure.connect(args.url) as store:
            args.func(store, args)
        return 0
    except _NotFound as exc:
        print(f"tenure: no job {exc.args[0]!r}", file=sys.stderr)
        return 1
    except tenure.InvalidArgument as exc:
        print(f"tenure: {exc}", file=sys.stderr)
        return 2
    except tenure.LeaseError as exc:
        print(f"tenure: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
