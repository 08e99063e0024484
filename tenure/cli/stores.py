"""Which store a command opens, and whether it may create one.

Only commands that write a job (``submit``, ``claim JOB_ID``, ``run``, ``demo``; ``claim`` and
``run`` not with ``--existing``, which refuses every job of a store that is not there) create a
store that does not exist; any other command opens it with ``create=False`` (where its backend
reads that option: SQLite, PostgreSQL, ZooKeeper), so on a missing store (a SQLite file that is
not there or holds no tenure tables, a PostgreSQL schema or ZooKeeper root without them) it
says so (exit 66) and leaves nothing behind: a mistyped path, schema or root does not become an
empty store. The default URL
names a file in the current directory, so a command that uses it says which file that is.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import tenure
from tenure.cli import exits
from tenure.core.options import parse_url
from tenure.core.registry import backend_class

DEFAULT_URL = "sqlite:///tenure-demo.db"
_CREATING = frozenset({"submit", "claim", "run", "demo"})


def sqlite_file(url: str) -> Path | None:
    """The file of a ``sqlite://`` URL, None for any other store (or ``:memory:``)."""
    parsed = parse_url(url)
    if parsed.scheme != "sqlite":
        return None
    from tenure.backends.sqlite import file_of  # the store's own reading of its URL

    return file_of(parsed)


def opened(args: argparse.Namespace) -> int | None:
    """None if the command may go on with ``args.url``; else the exit status, said on stderr.

    StoreNotFound if a command that opens the store itself (``dashboard``, whose server opens
    it in another process) and creates none finds no store."""
    refused = _sqlite_opened(args)
    if refused is None and args.func is None and (options := connect_options(args)):
        with tenure.connect(args.url, **options):
            pass
    return refused


def connect_options(args: argparse.Namespace) -> dict[str, Any]:
    """``create=False`` for a command that creates no store, where the store's backend reads it;
    ``run --max-attempts``'s limit as the store's default, so the claim that creates the job
    gives it that limit in the same atomic step."""
    options: dict[str, Any] = {}
    if args.command == "run" and getattr(args, "max_attempts", None) is not None:
        options["max_attempts"] = args.max_attempts
    if not _creates(args) and backend_class(parse_url(args.url).scheme).characteristics.create_option:
        options["create"] = False
    return options


def _sqlite_opened(args: argparse.Namespace) -> int | None:
    file = sqlite_file(args.url)
    if file is None:
        return None
    if not file.exists():
        _check_options(args.url)  # a malformed URL is a usage error, before a missing store
    if file.exists() or _creates(args):
        if args.url == DEFAULT_URL:
            print(f"tenure: using the default store {file.resolve()} (--url or --url-file to choose another)",
                  file=sys.stderr, flush=True)
        return None
    if args.command == "claim":
        print(f"tenure: nothing to claim: no store at {file.resolve()} (nothing was created)", file=sys.stderr)
    else:
        print(f"tenure: no store at {file.resolve()}: nothing was created (submit, claim JOB_ID or run "
              "creates one)", file=sys.stderr)
    return exits.NOTHING


def _check_options(url: str) -> None:
    """The store's own checks of the URL's options (InvalidArgument), made on a store in
    memory: the file the URL names is neither opened nor created."""
    query = parse_url(url).query
    with tenure.connect("sqlite:///:memory:" + (f"?{urlencode(query)}" if query else "")):
        pass


def _creates(args: argparse.Namespace) -> bool:
    if getattr(args, "existing", False):
        return False  # a store that is not there has no job: --existing refuses it, creating nothing
    return args.command in _CREATING and (args.command != "claim" or args.job_id is not None)
