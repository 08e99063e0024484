"""Real servers for development: etcd nodes and clusters, ZooKeeper servers and ensembles,
private PostgreSQL servers, their fault verbs and versions. The tests (``tests/servers/``
adds their per-backend harnesses and fixtures) and the benchmarks both start servers from here.
"""
