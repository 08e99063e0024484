"""Every fault the runner can inject, in one table.

The environments take their fault lists from it (``names``), the runner adds ``mixed``, and
``docs/reliability.md`` describes each fault from it (``markdown``): a fault added here is on
the page, and one missing here cannot be run.
"""

from __future__ import annotations

from dataclasses import dataclass

WORKER, NETWORK, SERVER, CLUSTER, ALL = "worker", "network", "server", "cluster", "all"


@dataclass(frozen=True)
class Fault:
    name: str
    scope: str  # worker: any backend; network, server: server backends; cluster: 3 nodes (and PostgreSQL)
    does: str


FAULTS = (
    Fault("pause", WORKER, "SIGSTOP a worker for 1.2 to 3 TTLs, then SIGCONT"),
    Fault("suspend", WORKER, "as pause, but the worker's `time.monotonic()` misses the pause (as after a "
                             "suspend): only its boot clock shows the time that passed"),
    Fault("burst", WORKER, "three extra processes claim the same held jobs at the same instant"),
    Fault("skew", WORKER, "workers under libfaketime: clocks +1 h, -1 h, rates x1.03 and x0.97 (inside the "
                          "5 % drift margin)"),
    Fault("kill-worker", WORKER, "kill -9 a worker and start a new one in its place"),
    Fault("forge", WORKER, "a process without the fencing secret writes to the destination under made-up "
                           "tokens: 2⁶³\u22121 unsigned, the next token the store has not issued signed with a wrong "
                           "secret, and a holder's own token and owner with a made-up signature (every write is "
                           "proven by an HMAC signature the workers make with the run's secret)"),
    Fault("run-term", WORKER, "SIGTERM to `tenure run` (and half the time to its command's process group) "
                              "mid-run, while a second `tenure run` waits for the same job; the command's "
                              "two children ignore SIGTERM, one in a session of its own (a double fork), "
                              "and the second run's command exits 0 leaving its children running"),
    Fault("net", NETWORK, "cut one worker off through its own loopback TCP proxy: blackhole, delay (50-600 ms) "
                          "or drop, for 1.2 to 3 TTLs"),
    Fault("server-kill", SERVER, "kill -9 a server (PostgreSQL: the postmaster and every backend), restart it "
                                 "after 0.5 to 1.5 TTLs"),
    Fault("leader-kill", CLUSTER, "kill -9 the leader of a 3-node etcd or ZooKeeper, restart it after 0.5 to "
                                  "1.5 TTLs"),
    Fault("leader-pause", CLUSTER, "SIGSTOP the leader of a 3-node etcd or ZooKeeper for 0.5 to 1.5 TTLs "
                                   "(PostgreSQL: the whole server)"),
    Fault("mixed", ALL, "every fault of the backend, one after another in random order"),
)

BY_NAME = {fault.name: fault for fault in FAULTS}


def names(*scopes: str) -> tuple[str, ...]:
    """The faults of these scopes, in the table's order."""
    return tuple(fault.name for fault in FAULTS if fault.scope in scopes)


def markdown() -> str:
    """The table of faults for docs/reliability.md."""
    rows = [f"| {fault.name} | {fault.does} |" for fault in FAULTS]
    return "\n".join(["| fault | what it does |", "|---|---|", *rows])
