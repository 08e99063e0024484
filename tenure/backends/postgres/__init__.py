"""The ``postgresql://`` backend; ``PostgresBackend`` is the class the registry loads (the
asyncio flavour's, ``AsyncPostgresBackend``, is in ``aio``). Its modules are listed in
docs/backends/postgres.md, "Code"."""

from tenure.backends.postgres.backend import PostgresBackend

__all__ = ["PostgresBackend"]
