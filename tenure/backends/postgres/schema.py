"""The PostgreSQL store's tables, created idempotently, and the migrations between versions.

Everything lives in one schema (``tenure`` by default, ``?schema=`` to choose), so several
stores share a database without meeting. ``meta`` holds the schema version; opening a store
applies the migrations it lacks, in order, in one transaction under an advisory lock, so
processes that open the same new store at once do not race on the catalogue.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from tenure.core.errors import BackendUnavailable, InvalidArgument, StoreNotFound

log = logging.getLogger("tenure.postgres")

SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
VERSION = 5

# Migration N takes a store from version N-1 to N. Job ids sort in code-point order (C
# collation), as every other backend sorts them. Times are the server's epoch seconds.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE SEQUENCE {s}.queue",
        """CREATE TABLE {s}.jobs (
            job_id text COLLATE "C" PRIMARY KEY, state text NOT NULL, owner text, token bigint NOT NULL,
            lease_until float8, ttl float8, submitted_at float8, claimed_at float8, renewed_at float8,
            completed_at float8, runs integer NOT NULL, result bytea, queued bigint)""",
        # claim_next's two queues: overdue leases by expiry, pending jobs by queue place.
        "CREATE INDEX jobs_pending ON {s}.jobs (queued) WHERE state = 'pending'",
        "CREATE INDEX jobs_leased ON {s}.jobs (lease_until) WHERE state = 'leased'",
        """CREATE TABLE {s}.events (id bigserial PRIMARY KEY, job_id text NOT NULL, op text NOT NULL,
            owner text, token bigint NOT NULL, at float8 NOT NULL, expires_at float8)""",
        "CREATE INDEX events_job ON {s}.events (job_id, id)",
        "CREATE INDEX events_at ON {s}.events (at)",
        """CREATE TABLE {s}.rejections (id bigserial PRIMARY KEY, job_id text NOT NULL, op text NOT NULL,
            owner text NOT NULL, token bigint NOT NULL, current_owner text, current_token bigint,
            at float8 NOT NULL, reason text NOT NULL, kind text NOT NULL, resource text)""",
        "CREATE INDEX rejections_at ON {s}.rejections (at)",
    ),
    # Sessions that watch(): writes notify only while one is registered.
    # A queue table churns: vacuum and analyze it after 2 % of its rows changed, not 20 %, so
    # claimed rows leave the pending index soon and the planner knows the queue's size.
    2: ("CREATE TABLE {s}.watchers (pid integer PRIMARY KEY, since float8 NOT NULL)",
        "ALTER TABLE {s}.jobs SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02)"),
    # One job's rejections (the dashboard's job detail) through an index, not a scan of the audit.
    3: ("CREATE INDEX IF NOT EXISTS rejections_job ON {s}.rejections (job_id, id)",),
    # Issue 28's job life cycle: attempts and their limit, the last failure, scheduled jobs and
    # the parked state (a text column: no constraint lists the states). Constant defaults add
    # no rewrite: a row written before reads as attempts 0, no limit, claimable now, and
    # queues at -Infinity, ahead of every job queued since, in its old order. queued_at is
    # when a pending job joined the queue (its claimable_at if scheduled): claim_next takes
    # the lowest (queued_at, queued) up to the server's now, so a scheduled job queues at its
    # time. A lease on its last attempt is no overdue candidate (its end parks the job).
    4: ("ALTER TABLE {s}.jobs ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0,"
        " ADD COLUMN IF NOT EXISTS max_attempts integer, ADD COLUMN IF NOT EXISTS last_error text,"
        " ADD COLUMN IF NOT EXISTS claimable_at float8, ADD COLUMN IF NOT EXISTS failed_at float8,"
        " ADD COLUMN IF NOT EXISTS queued_at float8 NOT NULL DEFAULT '-Infinity'",
        "DROP INDEX IF EXISTS {s}.jobs_pending",
        "CREATE INDEX jobs_pending ON {s}.jobs (queued_at, queued) WHERE state = 'pending'",
        "DROP INDEX IF EXISTS {s}.jobs_leased",
        "CREATE INDEX jobs_leased ON {s}.jobs (lease_until)"
        " WHERE state = 'leased' AND (max_attempts IS NULL OR attempts < max_attempts)"),
    # claim_next's order (tenure.core.order): leases that end at the same time by job id, read
    # in that order from the index rather than sorted.
    5: ("DROP INDEX IF EXISTS {s}.jobs_leased",
        "CREATE INDEX jobs_leased ON {s}.jobs (lease_until, job_id)"
        " WHERE state = 'leased' AND (max_attempts IS NULL OR attempts < max_attempts)"),
}


def check_schema_name(name: str) -> str:
    if not SCHEMA_NAME.match(name):
        raise InvalidArgument(f"schema {name!r}: expected lower-case letters, digits and _, "
                              "starting with a letter or _, at most 63 characters")
    return name


def migrate(conn: Any, schema: str, quoted: str, create: bool = True) -> int:
    """Bring ``schema`` to VERSION; returns the version found before. ``conn`` is autocommit.
    With ``create`` false a schema without tenure's ``meta`` table is StoreNotFound, nothing created."""
    with conn.transaction():
        # One opener at a time per schema; the lock ends with the transaction.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('tenure.schema.' || %s))", (schema,))
        if not create and conn.execute("SELECT to_regclass(%s)", (f"{quoted}.meta",)).fetchone()[0] is None:
            raise StoreNotFound(f"no such store: schema {schema!r} has no tenure tables "
                                "(create=false: nothing was created)")
        conn.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        conn.execute(f"CREATE TABLE IF NOT EXISTS {quoted}.meta (key text PRIMARY KEY, value text NOT NULL)")
        row = conn.execute(f"SELECT value FROM {quoted}.meta WHERE key = 'schema_version'").fetchone()
        found = int(row[0]) if row else 0
        if found > VERSION:
            raise InvalidArgument(f"schema {schema!r} has tenure schema version {found}; "
                                  f"this tenure reads up to {VERSION}: upgrade tenure")
        for version in range(found + 1, VERSION + 1):
            for statement in MIGRATIONS[version]:
                conn.execute(statement.format(s=quoted))
            log.info("PostgreSQL schema %s migrated to version %d", schema, version)
        conn.execute(f"INSERT INTO {quoted}.meta VALUES ('schema_version', %s) "
                     "ON CONFLICT (key) DO UPDATE SET value = excluded.value", (str(VERSION),))
    return found


def check_durability(conn: Any, allow_unsafe: bool) -> str | None:
    """Refuse a server that may lose acknowledged commits: a lost claim is a token issued twice.

    Returns the ``synchronous_commit`` our sessions must set, or None to keep the server's.
    ``fsync=off`` is the server's choice and cannot be undone per session: refused unless
    ``allow_unsafe``. ``synchronous_commit=off`` (or ``local`` with synchronous standbys)
    is a session setting: our sessions set ``on`` instead.
    """
    fsync, commit, standbys = conn.execute(
        "SELECT current_setting('fsync'), current_setting('synchronous_commit'),"
        " current_setting('synchronous_standby_names')").fetchone()
    if fsync != "on":
        message = ("the PostgreSQL server runs with fsync=off: a crash can lose acknowledged claims "
                   "and issue a token twice")
        if not allow_unsafe:
            raise BackendUnavailable(message + "; pass unsafe_durability=true to accept that")
        log.warning("%s (accepted by unsafe_durability=true)", message)
    asynchronous = conn.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'async'").fetchone()
    if asynchronous and asynchronous[0] and not standbys:
        log.warning("PostgreSQL has asynchronous standbys only: a failover to one may lose the latest "
                    "claims and issue a token twice; see docs/backends/postgres.md (failover)")
    if commit == "off" or (commit == "local" and standbys):
        return "on"
    return None
