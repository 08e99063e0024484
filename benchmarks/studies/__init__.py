"""Finished studies: each answered one question once (hand encoding or generated code, how to
count on etcd, where a cycle's time goes through a relay ...) and its answer is in
docs/performance.md with the command that made it. They still run, but nothing maintains their
figures; the maintained suite is ``python -m benchmarks.run`` and the modules beside this package."""
