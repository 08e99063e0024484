"""``docs/reliability.md``, generated from the runs kept in ``docs/reliability.json``.

Each invocation of ``tests.faults.run --report`` adds its results as one run (replacing an
earlier run of the same command) and rewrites the page from all of them, so every number on
the page comes from a run of the suite, with the command and seed that produced it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.faults import catalog

INTRO = """# Reliability: the fault-injection suite

What breaks leases in production is pauses beyond the lease duration, competing claims and clock
differences. `tests/faults/` runs them, in the manner of Jepsen's lock tests, against real stores: at
least eight worker processes claim jobs (`claim_next`), write fenced effects to an SQLite
destination through `tenure.fencing.SQLFence`, renew while they work and complete. The job
life cycle of issue 28 is in the workload too: a quarter of the leases end in `fail`
instead, with a `retry_in` of 0 to 0.3 s or with the store's backoff (made short by the run's
store options `retry_base=0.05&retry_max=0.4`), and one in twenty in `release`; after half of
its fails a worker claims the job again by name at once, so the store must refuse it as
scheduled (or parked); the run's operator submits jobs as they are taken, three in five
with `max_attempts` 1 to 3 and a quarter with a delay of 0.1 to 1 s, and now and then
requeues a parked job, half the time with a delay. Half of
the workers are careless, like the paused worker A of the README's story: they do not check their safe local
deadline and, once a renewal is refused, still write once more and try to complete, so the
store and the fence must refuse them. Every operation is recorded as invoked and then ok,
fail or unknown (timeouts, lost connections) with the machine's monotonic time, read past
libfaketime. A nemesis injects one fault, or all of them mixed:

{faults}

The checker (`tests/faults/checker.py`, `linear.py`) then verifies, over the history and
the final state of the store and the destination:

- per job, tokens of successful claims strictly increase, in real-time order and in the
  store's own history; every claim in the store's history was made by some worker;
- at the destination no effect with a lower token landed after one with a higher token;
  every effect landed came from the process that claimed its token, and was admitted before
  any claim with a higher token had returned (its lease was current by the store's record);
  every acknowledged effect landed;
- at most one accepted completion per job; every acknowledged completion is in the final
  state (after server kills and restarts), and every completed job was completed by a
  worker's completion that was not refused to it;
- every renewal and completion a worker saw refused as stale is in `rejections()`, and no
  rejection is there that no worker could have caused; the same for the destination fence;
- every forged write is refused as unproven (`ForgedToken`), none lands, and each is in the
  store's `rejections()` (kind `destination`, reason `unproven token: ...`) unless the store was
  down when it was reported; the real holders keep writing (the forged 2⁶³\u22121 locks nobody out);
- under `run-term`, no effect from a process of an earlier token after a later token's first
  effect: the processes of both `tenure run` commands of a job append their effects, unfenced,
  to one file in the order they happen, so a child of the first command still running once the
  second holder's command has started is caught (against f54a6b0's `tenure run`, which released
  the job as soon as the command's leader died, a 20 s run found 6,434 such effects);
- the claim/renew/complete history of each job is linearizable as a mutex with tokens and
  expiring leases (a Wing-Gong-Lowe search; an unknown outcome may take effect at any time
  after its invocation or never; a lease can expire no earlier than the TTL after the
  invocation of the claim or renewal that set it, less 2 % for the store's clock; on etcd,
  which may end a lease early, the store may also refuse an uncontested holder once its safe
  deadline can have passed, the TTL less the 5 % drift margin on the holder's own clock);
- the same search holds each job to its life cycle: a fail or release ends the holder's lease
  as a completion does (a stale one is refused and audited like a stale completion); a claim's
  attempt (`Lease.attempt`) is one more than the last, except after a release, which gives one
  back, and a requeue, which starts again from none; a job that fails on its last allowed
  attempt, or whose last allowed lease runs out, is parked: no claim takes it until a
  requeue; no claim returns before the job is claimable by the store's clock (after a fail, its
  `retry_in` or at least half the store's backoff for that attempt; after a delayed submit or
  requeue, the delay; each from the invocation, less 2 % for the store's clock); a claim is
  refused as parked (`JobParked`) only when the job may be parked, and as scheduled
  (`JobScheduled`) only if it began before the job's wait can have ended (on etcd, whose
  delays are etcd leases of whole seconds, up to 8 s later: `EtcdHarness.delay_late`); the
  store keeps each job's `max_attempts` as submitted.

`tests/faults/test_checker.py` feeds the checker hand-made histories that break each rule and
shows that it flags every one of them.

The short version runs with the test suite (`pytest tests/faults`: every fault on every
backend, a few seconds each). The long version is one command:

    python -m tests.faults.run --backend sqlite,etcd,etcd3,zk,zk3,postgres --fault all \\
        --seconds 300 --repeat 5 --seed 1 --report docs/reliability.md

(`etcd3` and `zk3` are the 3-node cluster and ensemble; `--fault all` runs each fault alone
and then all mixed; `--repeat` runs each case with consecutive seeds; the exit status is 1
on any violation). Each section below names the command and seed that produced it;
`python -m tests.faults.report` rewrites this page from `docs/reliability.json`. A command
that starts with `TENURE_ETCD=`, `TENURE_ZOOKEEPER=` or `TENURE_POSTGRES=` ran on that server
version (the version matrix, `python -m tests.matrix`, and [tested-with.md](tested-with.md));
the others ran on Debian 12's etcd 3.4.23, ZooKeeper 3.8.0 and PostgreSQL 15.

Columns: *ops* are claims, renewals, completions, fails, releases and fenced effects (and,
from the life-cycle runs on, the operator's submits and requeues); *unknown* are those
whose outcome the worker never learned (while a server is down, workers keep trying to
claim, so server faults add many unknown claims); *stale refused by store* are renewals,
completions, fails and releases the workers saw refused as stale, each found by the checker in `rejections()`;
*refused by destination* are effects the fence refused for a lower token; *audit records*
are all rejections in the store's audit; *faults injected* counts the nemesis's actions.
"""

FINDINGS = """## What the runs found

Violations are listed under the run that found them. Two causes were found, both on etcd;
the rules were not relaxed for either. A third flagged refusal was a known early end of an
etcd lease that tenure, as documented, does not mask past the holder's safe deadline; the
model now allows exactly that on etcd (the third item). With the job life cycle in the
model, a fourth cause, again on etcd, was found and fixed (the fifth item):

- **skew**, in the etcd backend before it was merged (kept below under "Earlier runs"): a
  lease claimed by a worker whose clock was an hour behind could be claimed again by a
  worker with a true clock while etcd still held the first lease, so two workers held the
  job at once. The backend floored a live lease's end at the reader's `now() + 1 ms` and
  then checked it against a later `now()`. Fixed on the etcd branch before the merge (the
  check uses the snapshot's own time and the claim requires that no lease key exists); the
  skew runs on main under Results have no violation, and `tests/faults/test_clock_skew.py`
  keeps the fault as a small deterministic test.
- **leader-pause**, in etcd 3.4.23 itself (etcd-io/etcd#15247; kept below under "Earlier
  runs"): a leader stopped with SIGSTOP resumes still counting lease TTLs it no longer owns
  and revokes leases that the new leader renewed meanwhile. A renewal is acknowledged and
  soon after the lease key is gone, before its TTL has run out since the renewal was sent,
  so another worker could claim the job while the holder still trusted its lease, and the
  holder's next renewal was refused while its lease should have been live. Fixed upstream
  by etcd-io/etcd#16822 (in 3.4.31 / 3.5.13); Debian 12's package predates it (Debian 13's
  3.5.16 has it, and leases still ended early there: docs/backends/etcd.md). tenure's etcd backend no
  longer trusts an early end: a claimer takes a lease etcd ended only one TTL after it first
  saw the key gone, and the holder, while its safe deadline runs, restores what etcd ended
  (docs/backends/etcd.md). The etcd runs under Results are of that version.
- **leader-pause**, etcd3 seed 32 (2026-12-03; no second holder): a careless holder's
  completion, sent 4 ms after its safe deadline, was refused 0.97 TTL after its renewal was
  sent; nobody else had claimed the job. A refusal that early means the lease key was gone:
  etcd had ended the lease early (inferred: the run's history was not kept and the violation
  text carried no reason; etcd's lease TTL is the job's plus 1 s, so only an early end can
  explain it), and tenure restores such a lease only while the holder's deadline runs, the
  TTL less the 5 % drift margin after the renewal was sent, as docs/protocol.md says. The
  model allowed a refusal of an uncontested holder only from 0.98 TTL. On etcd it now allows
  one from that holder's deadline too, on the holder's clock (a worker at x0.97 gets 0.98
  TTL of real time), and nothing else: claims still need the 0.98 TTL bound
  (`EtcdHarness.early_end_margin`; checker tests for both, and a violation now shows each
  refusal's reason). In six more runs of the case (seeds 32-37) the earliest refusal of an
  uncontested holder for an ended lease came at 1.64 TTL.
- **versions** (2026-12-03, `python -m tests.matrix`, the sections below whose command starts
  with `TENURE_`; [tested-with.md](tested-with.md)): every fault alone and mixed, single node
  and 3 nodes, on etcd 3.4.23 and 3.5.16, ZooKeeper 3.8.0 and 3.9.3, PostgreSQL 15 and 18.6:
  100 cases, 0 violations. The newer servers' differences were found by the test suites,
  not by the fault runs: ZooKeeper 3.9.3's `zookeeper.jar` names the machine's 3.8 jute jar
  in its manifest (the harness puts 3.9's own first), and ZooKeeper 3.9 checks READ on
  `exists`, so a client without rights failed at `connect` where 3.8 let it connect and
  refused each operation (now the same on both). etcd 3.5.16 has the fix for
  etcd-io/etcd#15247, yet its holders still restored leases that etcd ended early: 1 in
  the matrix (etcd3 mixed), and 0, 5 and 0 in three 30 s etcd3 leader-pause runs beside 2,
  6 and 7 on 3.4.23 (docs/backends/etcd.md).
- **skew**, on etcd with the job life cycle (2026-12-03, issue 28; fixed 2026-12-04: the etcd
  rows of the first life-cycle runs below, seed 2800, carry it): a job's delay and a failed
  job's wait were kept by the wall clock of each client, not by one the clients share. etcd
  has no clock API, and the etcd backend wrote `claimable_at` (and its `sched/<µs>` key) by
  the writer's wall clock and compared it with the reader's, so a worker whose clock was ahead
  claimed a delayed job early, and a job that a worker whose clock was behind delayed or
  failed was claimable by the others at once. In the skew run (seed 2800) job-00036 was
  submitted with a delay of 0.943 s (invoked at 4438.740 s) and claimed by w5, whose clock was
  an hour ahead, with the claim returning at 4439.399 s, 0.28 s early; job-00040 was failed by
  w6 (an hour behind) with `retry_in` 0.229 s at 4444.395 s and claimed by w7 with the claim
  returning 10 ms later, while w6's own claim of it was refused as scheduled. In the mixed run
  job-00105, failed by w2 (an hour behind) with `retry_in` 0.102 s, was claimed 98 ms after
  the fail was invoked; on the 3-node cluster's mixed run, job-00006, failed by w2 with
  `retry_in` 0.13 s, was claimed by w1 (an hour ahead) 38 ms after. Leases were not affected
  (etcd's TTLs decide them; no job had two holders), but the delay was not what issue 28
  promises ("claimable only after s seconds of the store's clock"). The histories are in
  `tests/faults/findings/`; `tests/faults/test_clock_skew.py` has the fault as a small
  deterministic test (a process an hour off sets or claims a 30 s delay), which passes on
  SQLite, ZooKeeper and PostgreSQL (the machine's boot clock, the leader's clock, the
  server's) and failed on etcd. The model was not relaxed. The fix: a delay on etcd is an etcd
  lease of the delay (rounded up to whole seconds) holding the job's `delay/` key, and every
  claim's transaction commits only while that key is absent, so etcd's clock decides
  (docs/backends/etcd.md, "Delays are etcd's"); `claimable_at` is the writer's estimate, used
  for order and display only. The checker no longer grants etcd any clock error: a delay may
  end late by the harness's `delay_late` (8 s on etcd: its minimum TTL of 2 s, its 0.5 s
  expiry tick, a leader paused or killed for up to 1.5 s, an election and the new leader
  giving the lease its whole TTL again), never early. The skew test passes on etcd with no
  exemption, and the reruns (`--backend etcd --fault skew,mixed` and `--backend etcd3 --fault
  leader-kill,leader-pause,mixed`, seed 2800, 25 s each) found 0 violations; a refusal as
  scheduled came at most 0.1 s after a delay's window, since the workload claims a failed job
  by name only at once.
- **server-kill**, in the PostgreSQL backend before it was merged (not a violation: the run
  stopped): after the server was killed and restarted, a store kept handing out the same dead
  pooled connection. The pool's idle check raised without closing it, and psycopg_pool puts
  a connection that fails the check but looks open back into the pool. The check now closes
  it; the conformance suite's `test_a_restart_keeps_acknowledged_writes_and_tokens_grow` keeps
  one store across a crash on every server backend.
"""


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Alone in reading and rewriting ``path`` (runs of the version matrix may finish together)."""
    with open(path.with_name(f".{path.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def save(json_path: Path, md_path: Path, command: str, seed: int, results: list[Any], note: str = "") -> None:
    with locked(json_path):
        runs: list[dict[str, Any]] = json.loads(json_path.read_text()) if json_path.exists() else []
        runs = [r for r in runs if r["command"] != command]
        runs.append({"command": command, "seed": seed, "note": note,
                     "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "results": [_plain(r) for r in results]})
        json_path.write_text(json.dumps(runs, indent=1) + "\n")
        md_path.write_text(render(runs))


def _plain(r: Any) -> dict[str, Any]:
    return {"backend": r.backend, "fault": r.fault, "seed": r.seed, "seconds": round(r.seconds, 1),
            "counts": dict(r.counts), "violations": r.violations[:50], "violation_count": len(r.violations),
            "unchecked": r.unchecked, "audit": r.audit, "injected": dict(r.injected),
            "early_ends": r.early_ends}


HEADER = ("| backend | fault | seed | ops | ok | fail | unknown | stale refused by store | refused by destination "
          "| audit records | effects landed | faults injected | violations | seconds |\n"
          "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")


def row(r: dict[str, Any]) -> str:
    c = Counter(r["counts"])
    return (f"| {r['backend']} | {r['fault']} | {r['seed']} | {c['ops']} | {c['ok']} | {c['fail']} | {c['info']} "
            f"| {c['store rejections seen']} | {c['destination rejections']} | {r['audit']} | {c['effects landed']} "
            f"| {sum(r['injected'].values())} | {r['violation_count']} | {r['seconds']:.0f} |")


def render(runs: list[dict[str, Any]]) -> str:
    current = [run for run in runs if not run.get("superseded")]
    earlier = [run for run in runs if run.get("superseded")]
    results = [r for run in current for r in run["results"]]
    ops = sum(r["counts"].get("ops", 0) for r in results)
    bad = sum(r["violation_count"] for r in results)
    lines = [INTRO.format(faults=catalog.markdown()), FINDINGS, "## Results", "",
             f"In all: {len(results)} runs, {ops} operations, {bad} violations, "
             f"{sum(r['unchecked'] for r in results)} jobs whose linearizability search ran out of budget.", ""]
    lines += _sections(current)
    if earlier:
        lines += ["## Earlier runs, on code since fixed", "",
                  "Kept because they found the faults described above; not counted in the totals.", ""]
        lines += _sections(earlier)
    return "\n".join(lines)


def _sections(runs: list[dict[str, Any]]) -> list[str]:
    lines: list[str] = []
    for run in runs:
        rs = run["results"]
        lines += [f"### `{run['command']}`", "",
                  f"Seed {run['seed']}; finished {run['finished']}; {sum(r['counts'].get('ops', 0) for r in rs)} "
                  f"operations; {sum(r['violation_count'] for r in rs)} violations."
                  + _early_ends(rs) + _life(rs)
                  + (f" {run['note']}" if run["note"] else "")
                  + (f" {run['superseded']}" if isinstance(run.get("superseded"), str) else ""),
                  "", HEADER, *[row(r) for r in rs], ""]
        shown = [(r, v) for r in rs for v in r["violations"][:3]]
        if shown:
            lines += ["Violations found (first three per run):", ""]
            lines += [f"- {r['backend']}/{r['fault']}/seed {r['seed']}: {v}" for r, v in shown]
            lines.append("")
    return lines


def _early_ends(rs: list[dict[str, Any]]) -> str:
    """How often etcd ended a lease early in a run's etcd cases, where the run counted it."""
    counted = [r for r in rs if r["backend"].startswith("etcd") and "early_ends" in r]
    if not counted:
        return ""
    where = [f"{r['backend']}/{r['fault']} {r['early_ends']}" for r in counted if r["early_ends"]]
    total = sum(r["early_ends"] for r in counted)
    return (" Leases etcd ended early that their holders restored (etcd-io/etcd#15247): "
            + (f"{total} ({', '.join(where)})." if total else "none."))


def _life(rs: list[dict[str, Any]]) -> str:
    """What a run's workload did with the job life cycle, where it had one."""
    c: Counter[str] = Counter()
    for r in rs:
        c.update(r["counts"])
    if not c["fail:ok"]:
        return ""
    return (f" Life cycle: {c['fail:ok']} fails ({c['fail:fail']} refused), {c['release:ok']} releases, "
            f"{c['retried claims']} claims of a later attempt, {c['JobScheduled']} claims refused as "
            f"scheduled and {c['JobParked']} as parked, {c['requeue:ok']} requeues.")


def main() -> None:
    """Rewrite docs/reliability.md from docs/reliability.json (after editing the prose)."""
    docs = Path(__file__).resolve().parents[2] / "docs"
    (docs / "reliability.md").write_text(render(json.loads((docs / "reliability.json").read_text())))


if __name__ == "__main__":
    main()
