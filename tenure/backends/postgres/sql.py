"""The statements of the PostgreSQL store: one statement, one round trip, per operation.

Each write is a single statement of CTEs that reads the server's clock once
(``clock_timestamp()``), judges the record, applies the change, writes the history event or,
for a refused renew/complete/release/fail, the rejection: all in one implicit transaction, so
the audit is atomic with the refusal. SQL has to judge here (a second round trip would cost
as much as the write), so the rules below repeat ``tenure.core.transitions``; each says which
function it mirrors, and the backend decodes any refused row with ``transitions`` again, so a
disagreement shows up as a retry rather than as a wrong answer
(tests/backends/test_postgres_lifecycle.py holds the life cycle's statements to it, case by case).

Statements name their tables through ``{s}``, the schema, quoted once when the backend opens.
"""

from __future__ import annotations

from tenure.core.lifecycle import GROWTH
from tenure.core.records import JobState, Op, Reason
from tenure.core.transitions import REPLACING
from tenure.core.validation import LAST_TOKEN, MAX_JOB_ID, refused_class

_CLOCK = "clock AS MATERIALIZED (SELECT extract(epoch FROM clock_timestamp())::float8 AS now)"
_FLOAT_MAX = "1.7976931348623157e308"
JOB_COLUMNS = ("job_id, state, owner, token, lease_until, ttl, submitted_at, claimed_at, renewed_at, "
               "completed_at, runs, result, attempts, max_attempts, last_error, claimable_at, failed_at")
WIDTH = len(JOB_COLUMNS.split(","))  # a job row's values, in that order
ATTEMPTS_AT = 12  # where a job row's attempts are


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _escaped(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


# codec.job_id_problem in a regular expression: a character no job id may contain (PostgreSQL
# text holds no NUL). Printable ASCII, the common case, is told by the first test alone: its
# length in bytes (read from the value's header) is its length in characters, and a search for
# any other character costs half an anchored match of the whole id.
_REFUSED_CLASS = refused_class(_escaped)
_TIMES = ("lease_until", "ttl", "submitted_at", "claimed_at", "renewed_at", "completed_at", "claimable_at",
          "failed_at")


def valid(alias: str) -> str:
    """A row ``decode_row`` accepts (``codec.job_record``), as far as SQL can tell: a corrupt
    row is never changed. Times are finite (NaN compares above every number: its test fails too)."""
    a = alias
    finite = " AND ".join(f"({a}.{c} IS NULL OR abs({a}.{c}) <= {_FLOAT_MAX})" for c in _TIMES)
    return (f"({a}.token BETWEEN 0 AND {LAST_TOKEN} AND {a}.runs >= 0 AND {finite} AND {a}.attempts >= 0"
            f" AND ({a}.max_attempts IS NULL OR {a}.max_attempts >= 1)"
            f" AND ((octet_length({a}.job_id) BETWEEN 1 AND {MAX_JOB_ID} AND {a}.job_id !~ '[^ -~]')"
            f" OR (char_length({a}.job_id) BETWEEN 1 AND {MAX_JOB_ID} AND {a}.job_id !~ '[{_REFUSED_CLASS}]'))"
            f" AND ({a}.state IN ('pending', 'completed', 'parked')"
            f" OR ({a}.state = 'leased' AND {a}.owner IS NOT NULL AND {a}.lease_until IS NOT NULL"
            f" AND {a}.ttl IS NOT NULL)))")


def _next(alias: str) -> str:
    """What a claim may take (transitions.is_next, claimability apart): a valid row whose token
    a claim can follow."""
    return f"{alias}.token < {LAST_TOKEN} AND {valid(alias)}"


def _cols(alias: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in JOB_COLUMNS.split(","))


def attempt_left(alias: str) -> str:
    """Not on its last attempt (``NOT JobRecord.out_of_attempts``), written as the predicate
    of the jobs_leased index: a lease on its last attempt parks its job when it runs out."""
    return f"({alias}.max_attempts IS NULL OR {alias}.attempts < {alias}.max_attempts)"


def _claimable(alias: str, now: str) -> str:
    # transitions.is_claimable: pending and its claimable_at come, or leased with the lease
    # run out by store time and an attempt left.
    a = alias
    return (f"(({a}.state = 'pending' AND ({a}.claimable_at IS NULL OR {a}.claimable_at <= {now}))"
            f" OR ({a}.state = 'leased' AND {a}.lease_until <= {now} AND {attempt_left(a)}))")


def _after(now: str, delay: str) -> str:
    # transitions._after: a claimable_at only for a delay above 0.
    return f"CASE WHEN {delay} > 0 THEN {now} + {delay} END"


# lifecycle.Retry.seconds for the failing row's attempts, in the same float8 operations.
WAIT = f"""CASE WHEN %(after)s::float8 IS NOT NULL THEN %(after)s::float8 ELSE (CASE
    WHEN (greatest(j.attempts, 1) - 1)::float8 * ln(%(factor)s::float8) <= {GROWTH}
      THEN least(%(cap)s::float8, %(base)s::float8 * power(%(factor)s::float8, (greatest(j.attempts, 1) - 1)::float8))
    WHEN %(base)s::float8 > 0 THEN %(cap)s::float8 ELSE 0::float8 END) * (0.5::float8 + 0.5::float8 * %(draw)s::float8)
  END"""

_NO_ROW = ("NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::float8, NULL::float8, NULL::float8, "
           "NULL::float8, NULL::float8, NULL::float8, NULL::int, NULL::bytea, NULL::int, NULL::int, NULL::text, "
           "NULL::float8, NULL::float8")  # where a job row would be
_EVENT = "INSERT INTO {s}.events (job_id, op, owner, token, at, expires_at)"


def notify(payload: str) -> str:
    """LISTEN/NOTIFY for watch(): 'j' and a job id for a changed job, 'r' for a new rejection.

    Only while a watcher is registered: PostgreSQL serialises the commits of notifying
    transactions (one lock for the whole server), which would cost every write when nobody
    listens. The check is one read of a table that is almost always empty.
    """
    return (f"(CASE WHEN %(channel)s <> '' AND EXISTS (SELECT 1 FROM {{s}}.watchers)"
            f" THEN pg_notify(%(channel)s, {payload})::text END)")


def _touch(job: str) -> str:
    return notify(f"'j' || {job}")

# claim(job): a missing job is created leased (token 1, its first attempt, the limit given);
# an existing one is taken only if claimable, counting an attempt (transitions.claim). ON
# CONFLICT locks the existing row before the WHERE judges it.
# A refused claim reads the row FOR UPDATE: after ON CONFLICT's lock that is the version it
# judged, which the backend hands to transitions.refuse_claim for the exact error.
CLAIM = f"""
WITH {_CLOCK},
won AS (
  INSERT INTO {{s}}.jobs AS j (job_id, state, owner, token, lease_until, ttl, submitted_at, claimed_at,
                             runs, queued, queued_at, attempts, max_attempts)
  SELECT %(job)s, 'leased', %(owner)s, 1, now + %(ttl)s, %(ttl)s, now, now, 1, nextval('{{s}}.queue'), now, 1,
         %(max_attempts)s::integer FROM clock
  ON CONFLICT (job_id) DO UPDATE SET state = 'leased', owner = excluded.owner, token = j.token + 1,
    lease_until = excluded.lease_until, ttl = excluded.ttl, claimed_at = excluded.claimed_at, renewed_at = NULL,
    attempts = j.attempts + 1, claimable_at = NULL
  WHERE {_next('j')} AND {_claimable('j', 'excluded.claimed_at')}
  RETURNING j.job_id, j.owner, j.token, j.lease_until, j.ttl, j.claimed_at, j.attempts),
event AS ({_EVENT} SELECT job_id, '{Op.CLAIM}', owner, token, claimed_at, lease_until FROM won)
SELECT 'won', NULL, NULL, w.owner, w.token, w.lease_until, w.ttl, NULL, NULL, NULL, NULL, NULL, NULL, w.attempts,
       NULL, NULL, NULL, NULL, NULL, {_touch('w.job_id')} FROM won w  -- a lease needs no more: the fewer
       -- values, the less to decode
UNION ALL
SELECT 'refused', c.*, NULL FROM (
  SELECT {_cols('j')}, clock.now FROM {{s}}.jobs j, clock
  WHERE j.job_id = %(job)s AND NOT EXISTS (SELECT 1 FROM won) FOR UPDATE OF j) c
"""

# claim_next (tenure.core.order's rule, kept here so that it stays one statement; the
# conformance suite's suite_order checks it against the core): an overdue lease with an
# attempt left first (by expiry, then job id), else the pending job that became claimable
# first (by queue place: queued_at, a scheduled job's claimable_at, up to now, so the scan of
# jobs_pending stops at the first job not due; then the queue sequence), each through its
# partial index (transitions.candidate_at); SKIP LOCKED passes over rows another claimer is
# taking, and FOR UPDATE re-checks the row it locks against its latest version. A pending
# job's queued_at is the server's time of the write that queued it: only a server clock
# stepped back since delays it (by the step), as it lengthens leases.
# claim_next_many: the same for up to %(n)s jobs, overdue leases first and pending jobs after
# them (as many as the overdue left room for), each its own claim: its own token, attempt and
# history event; the rows come back in that order. claim_next keeps LIMIT 1 and NOT EXISTS:
# a plan for one row, whatever the table's size.
# The store's time is compared as a scalar subquery and claim_next's pick is LIMIT 1, so that
# a plan cached while the table was small (psycopg prepares; PostgreSQL may keep one generic
# plan until the next ANALYZE) still reads jobs_leased from that bound and updates the row
# through the primary key: with ``clock`` joined, a plan made at 130 rows read all of
# jobs_leased and scanned the table, 10 ms a claim_next at 10,000 held leases.
def _claim_next(many: bool) -> str:
    n, room = ("%(n)s", "%(n)s - (SELECT count(*) FROM overdue)") if many else ("1", "1")
    return f"""
WITH {_CLOCK},
overdue AS MATERIALIZED (
  SELECT j.job_id, j.lease_until FROM {{s}}.jobs j
  WHERE j.state = 'leased' AND {attempt_left('j')} AND j.lease_until <= (SELECT now FROM clock) AND {_next('j')}
  ORDER BY j.lease_until, j.job_id LIMIT {n} FOR UPDATE OF j SKIP LOCKED),
waiting AS MATERIALIZED (
  SELECT j.job_id, j.queued_at, j.queued FROM {{s}}.jobs j
  WHERE j.state = 'pending' AND j.queued_at <= (SELECT now FROM clock)
    AND (j.claimable_at IS NULL OR j.claimable_at <= (SELECT now FROM clock)) AND {_next('j')}
    {"" if many else "AND NOT EXISTS (SELECT 1 FROM overdue)"}
  ORDER BY j.queued_at, j.queued LIMIT {room} FOR UPDATE OF j SKIP LOCKED),
pick AS (SELECT job_id, 0 AS part, lease_until AS at, 0::bigint AS queued FROM overdue
         UNION ALL SELECT job_id, 1, queued_at, queued FROM waiting{"" if many else " LIMIT 1"}),
won AS (
  UPDATE {{s}}.jobs j SET state = 'leased', owner = %(owner)s, token = j.token + 1,
    lease_until = clock.now + %(ttl)s, ttl = %(ttl)s, claimed_at = clock.now, renewed_at = NULL,
    attempts = j.attempts + 1, claimable_at = NULL
  FROM pick, clock WHERE j.job_id = pick.job_id
  RETURNING j.job_id, j.owner, j.token, j.lease_until, j.ttl, j.claimed_at, j.attempts),
event AS ({_EVENT} SELECT job_id, '{Op.CLAIM}', owner, token, claimed_at, lease_until FROM won)
SELECT w.job_id, w.owner, w.token, w.lease_until, w.ttl, w.attempts, {_touch('w.job_id')}
FROM won w JOIN pick p ON p.job_id = w.job_id ORDER BY p.part, p.at, p.queued, p.job_id
"""


CLAIM_NEXT = _claim_next(many=False)
CLAIM_NEXT_MANY = _claim_next(many=True)


def _reason(token: str, owner: str) -> str:
    """transitions.check, in its order, of the row ``c`` for a lease of ``token`` and ``owner``;
    a corrupt row is reported before anything is judged."""
    return f"""CASE
    WHEN c.job_id IS NULL THEN {_lit(Reason.NOT_FOUND)}
    WHEN NOT {valid('c')} THEN 'corrupt'
    WHEN c.token < {token} THEN {_lit(Reason.NEVER_ISSUED)}
    WHEN c.token <> {token} THEN {_lit(Reason.SUPERSEDED)}
    WHEN c.state NOT IN ('leased', 'completed') THEN {_lit(Reason.NOT_LEASED)}
    WHEN c.owner IS DISTINCT FROM {owner} THEN {_lit(Reason.OWNER_MISMATCH)}
    WHEN c.state = 'completed' THEN {_lit(Reason.COMPLETED)}
    WHEN c.lease_until IS NULL OR c.lease_until <= clock.now THEN {_lit(Reason.EXPIRED)}
  END"""


_REASON = _reason("%(token)s", "%(owner)s")


def _replacing(op: Op, many: bool) -> str:
    """transitions.replaced: an accepted renewal's event replaces its claim's earlier renewal
    event, in the same statement (its DELETE does not see the row ``event`` inserts). The job
    ids are the parameters', so the (job_id, id) index is searched whatever ``done`` holds."""
    if op is not REPLACING:
        return ""
    jobs = "e.job_id = ANY(%(jobs)s::text[])" if many else "e.job_id = %(job)s"
    return f"""
replaced AS (DELETE FROM {{s}}.events e WHERE {jobs} AND e.op = '{op}'
  AND (e.job_id, e.token) IN (SELECT job_id, token FROM done)),"""


def _holder(op: Op, change: str) -> str:
    """renew/complete/release/fail: apply ``change`` if the lease is current, else audit the
    refusal. History names the holder (steps.holder), also when the job was given back.

    The UPDATE judges the row it locks (a concurrent change makes PostgreSQL re-check the
    latest version). Only when it changed nothing is the row read FOR UPDATE to say why and
    write the rejection; a row found current after all (it changed in between) writes
    nothing and comes back as 'retry'.
    """
    return f"""
WITH {_CLOCK},
done AS (
  UPDATE {{s}}.jobs j SET {change} FROM clock
  WHERE j.job_id = %(job)s AND j.token = %(token)s AND j.owner = %(owner)s AND j.state = 'leased'
    AND j.lease_until > clock.now AND {valid('j')}
  RETURNING j.job_id, j.token, j.lease_until, j.ttl, j.attempts, clock.now),
event AS ({_EVENT} SELECT job_id, '{op}', %(owner)s, token, now, lease_until FROM done),{_replacing(op, False)}
cur AS MATERIALIZED (
  SELECT {_cols('j')} FROM {{s}}.jobs j
  WHERE j.job_id = %(job)s AND NOT EXISTS (SELECT 1 FROM done) FOR UPDATE),
verdict AS MATERIALIZED (
  SELECT {_REASON} AS reason, c.*, clock.now FROM clock LEFT JOIN cur c ON true
  WHERE NOT EXISTS (SELECT 1 FROM done)),
rejected AS (
  INSERT INTO {{s}}.rejections (job_id, op, owner, token, current_owner, current_token, at, reason, kind)
  SELECT %(job)s, '{op}', %(owner)s, %(token)s, v.owner, coalesce(v.token, 0), v.now, v.reason, 'store'
  FROM verdict v WHERE v.reason IS NOT NULL AND v.reason <> 'corrupt'
  RETURNING id)
SELECT 'done', d.lease_until, d.ttl, d.attempts, d.now, {_touch('d.job_id')}, {_NO_ROW}
  FROM done d
UNION ALL
SELECT coalesce(v.reason, 'retry'), NULL, NULL, NULL, v.now,
       CASE WHEN EXISTS (SELECT 1 FROM rejected) THEN {notify("'r'")} END, {_cols('v')}
  FROM verdict v
"""


RENEW = _holder(Op.RENEW, "lease_until = clock.now + %(ttl)s, ttl = %(ttl)s, renewed_at = clock.now")
COMPLETE = _holder(Op.COMPLETE, f"state = '{JobState.COMPLETED}', lease_until = NULL, "
                                "completed_at = clock.now, result = %(result)s")
# transitions.release: the token stays, so the next claim gets a higher one; the attempt is
# given back; the job queues from its release (tenure.core.order), behind those waiting.
RELEASE = _holder(Op.RELEASE, f"state = '{JobState.PENDING}', owner = NULL, lease_until = NULL, ttl = NULL, "
                              "attempts = greatest(j.attempts - 1, 0), queued_at = clock.now, "
                              "queued = nextval('{s}.queue')")
# transitions.fail: parked on the last attempt, else pending once the Retry's wait for the
# row's attempts has passed, queued at that time (SET reads the row as it was).
_OUT = f"NOT {attempt_left('j')}"
FAIL = _holder(Op.FAIL, f"""state = CASE WHEN {_OUT} THEN '{JobState.PARKED}' ELSE '{JobState.PENDING}' END,
    owner = NULL, lease_until = NULL, ttl = NULL, last_error = %(error)s, failed_at = clock.now,
    claimable_at = CASE WHEN {attempt_left('j')} THEN {_after('clock.now', f'({WAIT})')} END,
    queued_at = clock.now + CASE WHEN {_OUT} THEN 0 ELSE {WAIT} END, queued = nextval('{{s}}.queue')""")

# renew_many and complete_many: RENEW or COMPLETE for many (job, owner, token, argument) rows
# in one statement, each row judged as RENEW judges its one (transitions.check's order). Every
# asked row is locked first, in job order, and judged once on the version locked, which nothing
# else can change before the UPDATE: the current ones are changed (the UPDATE matches them by
# key alone, so the planner, which cannot know how many rows a CTE holds, has no filter to
# misjudge into a quadratic plan), each other one audited alone.
# Rows come back with their place in the arrays (``n``): 'done', or why it was refused; a row
# judged current but not changed (it changed in between) does not come back, and is asked again.
def _holders(op: Op, argument: str, change: str) -> str:
    """``argument``: the array of each lease's own value (``v.arg`` in ``change``)."""
    return f"""
WITH {_CLOCK},
want AS MATERIALIZED (
  SELECT * FROM unnest(%(jobs)s::text[], %(owners)s::text[], %(tokens)s::bigint[], {argument})
    WITH ORDINALITY AS w(job_id, owner, token, arg, n)),
cur AS MATERIALIZED (
  SELECT {_cols('j')} FROM {{s}}.jobs j WHERE j.job_id = ANY(%(jobs)s::text[]) ORDER BY j.job_id FOR UPDATE),
verdict AS MATERIALIZED (
  SELECT w.n, w.job_id AS asked_job, w.owner AS asked_owner, w.token AS asked_token, w.arg,
         {_reason('w.token', 'w.owner')} AS reason, {_cols('c')}, clock.now
  FROM want w CROSS JOIN clock LEFT JOIN cur c ON c.job_id = w.job_id),
done AS (
  UPDATE {{s}}.jobs j SET {change} FROM verdict v
  WHERE v.reason IS NULL AND j.job_id = v.asked_job AND j.token = v.asked_token AND j.owner = v.asked_owner
  RETURNING v.n, j.job_id, j.owner, j.token, j.lease_until, j.ttl, v.now),
event AS ({_EVENT} SELECT job_id, '{op}', owner, token, now, lease_until FROM done),{_replacing(op, True)}
rejected AS (
  INSERT INTO {{s}}.rejections (job_id, op, owner, token, current_owner, current_token, at, reason, kind)
  SELECT v.asked_job, '{op}', v.asked_owner, v.asked_token, v.owner, coalesce(v.token, 0), v.now, v.reason,
         'store'
  FROM verdict v WHERE v.reason IS NOT NULL AND v.reason <> 'corrupt'
  RETURNING id)
SELECT d.n, 'done', d.lease_until, d.ttl, d.now, {_touch('d.job_id')}, {_NO_ROW}
  FROM done d
UNION ALL
SELECT v.n, v.reason, NULL, NULL, v.now,
       CASE WHEN EXISTS (SELECT 1 FROM rejected) THEN {notify("'r'")} END, {_cols('v')}
  FROM verdict v WHERE v.reason IS NOT NULL
"""


RENEW_MANY = _holders(Op.RENEW, "%(ttls)s::float8[]", "lease_until = v.now + v.arg, ttl = v.arg, renewed_at = v.now")
COMPLETE_MANY = _holders(Op.COMPLETE, "%(results)s::bytea[]",
                         f"state = '{JobState.COMPLETED}', lease_until = NULL, completed_at = v.now, result = v.arg")

# submit_many: new jobs pending, completed ones a new run with its attempts reset
# (transitions.submit), the rest untouched; nothing at all is written if any of the jobs is
# corrupt (the backend raises). A delayed job queues at its claimable_at.
SUBMIT = f"""
WITH {_CLOCK},
wanted AS (SELECT id, min(ord) AS ord FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS u(id, ord) GROUP BY id),
bad AS MATERIALIZED (
  SELECT {_cols('j')} FROM {{s}}.jobs j WHERE j.job_id = ANY(%(ids)s::text[]) AND NOT {valid('j')} LIMIT 1),
put AS (
  INSERT INTO {{s}}.jobs AS j (job_id, state, token, submitted_at, runs, queued, queued_at, max_attempts,
                             claimable_at)
  SELECT w.id, 'pending', 0, clock.now, 1, nextval('{{s}}.queue'), clock.now + %(delay)s::float8,
         %(max_attempts)s::integer, {_after('clock.now', '%(delay)s::float8')}
  FROM (SELECT id FROM wanted ORDER BY ord) w, clock WHERE NOT EXISTS (SELECT 1 FROM bad)
  ON CONFLICT (job_id) DO UPDATE SET state = 'pending', owner = NULL, lease_until = NULL, ttl = NULL,
    submitted_at = excluded.submitted_at, claimed_at = NULL, renewed_at = NULL, completed_at = NULL,
    runs = j.runs + 1, result = NULL, queued = excluded.queued, queued_at = excluded.queued_at, attempts = 0,
    max_attempts = excluded.max_attempts, last_error = NULL, claimable_at = excluded.claimable_at,
    failed_at = NULL
  WHERE j.state = 'completed' AND {valid('j')}
  RETURNING j.job_id, j.token, j.submitted_at),
event AS ({_EVENT} SELECT job_id, '{Op.SUBMIT}', %(actor)s, token, submitted_at, NULL FROM put),
told AS (SELECT count({notify("'j' || job_id")}) FROM put)
SELECT b.*, (SELECT * FROM told) FROM bad b
UNION ALL SELECT {", ".join(["NULL"] * WIDTH)}, (SELECT * FROM told) WHERE NOT EXISTS (SELECT 1 FROM bad)
"""

# force_expire: the row is locked first, so the token the operator confirmed is compared
# with the version that is changed (or not).
FORCE_EXPIRE = f"""
WITH {_CLOCK},
cur AS MATERIALIZED (SELECT {_cols('j')} FROM {{s}}.jobs j WHERE j.job_id = %(job)s FOR UPDATE),
done AS (
  UPDATE {{s}}.jobs j SET lease_until = clock.now FROM cur c, clock
  WHERE j.job_id = c.job_id AND {valid('c')} AND (%(expected)s::bigint IS NULL OR c.token = %(expected)s::bigint)
    AND c.state = 'leased' AND c.lease_until > clock.now
  RETURNING j.job_id, j.owner, j.token, j.lease_until),
event AS ({_EVENT} SELECT job_id, '{Op.EXPIRE}', coalesce(%(actor)s, owner), token, lease_until, lease_until
  FROM done)
SELECT c.*, (SELECT count({notify("'j' || job_id")}) FROM done) FROM cur c
"""

# requeue (transitions.requeue, with force_expire's token rule): the row locked first, then
# judged; a job not held starts afresh (attempts 0), queued when its delay is over.
REQUEUE = f"""
WITH {_CLOCK},
cur AS MATERIALIZED (SELECT {_cols('j')} FROM {{s}}.jobs j WHERE j.job_id = %(job)s FOR UPDATE),
done AS (
  UPDATE {{s}}.jobs j SET state = '{JobState.PENDING}', owner = NULL, lease_until = NULL, ttl = NULL, attempts = 0,
    claimable_at = {_after('clock.now', '%(delay)s::float8')}, queued_at = clock.now + %(delay)s::float8,
    queued = nextval('{{s}}.queue')
  FROM cur c, clock
  WHERE j.job_id = c.job_id AND {valid('c')} AND (%(expected)s::bigint IS NULL OR c.token = %(expected)s::bigint)
    AND c.state <> 'completed' AND NOT (c.state = 'leased' AND c.lease_until > clock.now)
  RETURNING j.job_id, j.token),
event AS ({_EVENT} SELECT job_id, '{Op.REQUEUE}', %(actor)s, token, clock.now, NULL FROM done, clock)
SELECT c.*, clock.now, (SELECT count({notify("'j' || job_id")}) FROM done) FROM cur c, clock
"""

RECORD_REJECTION = f"""
INSERT INTO {{s}}.rejections (job_id, op, owner, token, current_owner, current_token, at, reason, kind,
                              resource)
VALUES (%(job)s, %(op)s, %(owner)s, %(token)s, %(current_owner)s, %(current_token)s, %(at)s, %(reason)s,
        %(kind)s, %(resource)s)
RETURNING {notify("'r'")}
"""

NOW = "SELECT extract(epoch FROM clock_timestamp())::float8"
GET = f"SELECT {JOB_COLUMNS}, extract(epoch FROM clock_timestamp())::float8 FROM {{s}}.jobs WHERE job_id = %(job)s"
# Keyset pages over the primary key: each page an index range, never a rescan.
JOBS_PAGE = (f"SELECT {JOB_COLUMNS}, extract(epoch FROM clock_timestamp())::float8 FROM {{s}}.jobs"
             " WHERE job_id > %(after)s ORDER BY job_id LIMIT %(limit)s")
REJECTIONS = """
SELECT * FROM (SELECT job_id, op, owner, token, current_owner, current_token, at, reason, kind, resource, id
               FROM {s}.rejections WHERE at >= %(since)s AND id > %(after)s ORDER BY id DESC LIMIT %(limit)s) r
ORDER BY id"""
JOB_REJECTIONS = """
SELECT * FROM (SELECT job_id, op, owner, token, current_owner, current_token, at, reason, kind, resource, id
               FROM {s}.rejections WHERE job_id = %(job)s AND at >= %(since)s ORDER BY id DESC LIMIT %(limit)s) r
ORDER BY id"""
HISTORY = """
SELECT * FROM (SELECT job_id, op, owner, token, at, expires_at, id FROM {s}.events
               WHERE at >= %(since)s ORDER BY id DESC LIMIT %(limit)s) e
ORDER BY id"""
# One job's: its own statement, so the planner reads the (job_id, id) index (a "job IS NULL OR"
# form, planned once for both, may scan the table).
JOB_HISTORY = """
SELECT * FROM (SELECT job_id, op, owner, token, at, expires_at, id FROM {s}.events
               WHERE job_id = %(job)s AND at >= %(since)s ORDER BY id DESC LIMIT %(limit)s) e
ORDER BY id"""
# The newest %(keep)s rows by count, not by id: a renewal's event replaces a row (RENEW), so
# ids run ahead of the rows kept. A walk of the primary key's last %(keep)s entries.
TRIM = ("DELETE FROM {s}.{table} WHERE id <= (SELECT id FROM {s}.{table} ORDER BY id DESC"
        " OFFSET %(keep)s LIMIT 1)")

SUMMARY = f"""
SELECT CASE WHEN NOT {valid('j')} THEN 'corrupt'
            WHEN j.state = 'leased' AND j.lease_until <= %(now)s AND NOT {attempt_left('j')} THEN 'parked'
            WHEN j.state = 'leased' AND j.lease_until <= %(now)s THEN 'expired'
            WHEN j.state = 'leased' AND j.lease_until <= %(soon)s THEN 'soon'
            WHEN j.state = 'pending' AND j.claimable_at > %(now)s THEN 'scheduled' ELSE j.state END, count(*)
FROM {{s}}.jobs j GROUP BY 1
UNION ALL SELECT 'rejections', count(*) FROM {{s}}.rejections WHERE at >= %(hour)s"""
STATE_COUNTS = "SELECT state, count(*) FROM {s}.jobs GROUP BY state"

# watch(): register while listening; rows of watchers whose session ended are cleared first.
WATCH_START = """
WITH gone AS (DELETE FROM {s}.watchers w WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = w.pid))
INSERT INTO {s}.watchers VALUES (pg_backend_pid(), extract(epoch FROM clock_timestamp())) ON CONFLICT DO NOTHING"""
WATCH_STOP = "DELETE FROM {s}.watchers WHERE pid = pg_backend_pid()"

# By name, for the backend to bind to its schema once.
STATEMENTS = {"CLAIM": CLAIM, "CLAIM_NEXT": CLAIM_NEXT, "RENEW": RENEW, "COMPLETE": COMPLETE, "RELEASE": RELEASE,
              "RENEW_MANY": RENEW_MANY, "CLAIM_NEXT_MANY": CLAIM_NEXT_MANY, "COMPLETE_MANY": COMPLETE_MANY,
              "FAIL": FAIL, "SUBMIT": SUBMIT, "REQUEUE": REQUEUE, "FORCE_EXPIRE": FORCE_EXPIRE,
              "RECORD_REJECTION": RECORD_REJECTION, "NOW": NOW,
              "GET": GET, "JOBS_PAGE": JOBS_PAGE, "REJECTIONS": REJECTIONS, "JOB_REJECTIONS": JOB_REJECTIONS,
              "HISTORY": HISTORY, "JOB_HISTORY": JOB_HISTORY,
              "SUMMARY": SUMMARY, "STATE_COUNTS": STATE_COUNTS,
              "WATCH_START": WATCH_START, "WATCH_STOP": WATCH_STOP}
