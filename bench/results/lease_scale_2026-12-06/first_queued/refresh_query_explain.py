"""Postgres's time for the fair-share view's read of the queue, before and after, on the
database of a running lease bench (the newest paretune_* database):

    .venv/bin/python bench/lease_scale.py --shapes 400x25 --cycles 8000 &
    .venv/bin/python bench/results/lease_scale_2026-12-06/first_queued/refresh_query_explain.py 20

EXPLAIN ANALYZE of each query, alternating, ten times. Printed on 2026-12-06 (2-core machine):
[('completed', 3703), ('running', 1), ('queued', 9843)] [(400,)]; 401 rows from each;
before: median 19.67 ms (min 18.01); after: median 2.67 ms (min 2.57).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).parent
QUERIES = {"before": HERE / "queue_query_before.sql", "after": HERE / "queue_query_after.sql"}


def main() -> None:
    admin = psycopg.connect("postgresql://127.0.0.1:5432/postgres", autocommit=True)
    found = None
    for _ in range(600):  # until the bench has made its database
        found = admin.execute("SELECT datname FROM pg_database WHERE datname LIKE 'paretune%' "
                              "ORDER BY oid DESC LIMIT 1").fetchone()
        if found:
            break
        time.sleep(0.5)
    assert found is not None, "no paretune_* database: start the lease bench first"
    time.sleep(float(sys.argv[1]))  # until its studies have queued their trials
    db = psycopg.connect(f"postgresql://127.0.0.1:5432/{found[0]}", autocommit=True)
    print(db.execute("SELECT state, count(*) FROM trials GROUP BY state").fetchall(),
          db.execute("SELECT count(*) FROM studies").fetchall())
    times: dict[str, list[float]] = {name: [] for name in QUERIES}
    for i in range(10):
        for name, path in QUERIES.items():
            query = path.read_text()
            plan = [row[0] for row in db.execute("EXPLAIN (ANALYZE) " + query)]
            times[name].append(float(plan[-1].split()[2]))  # "Execution Time: X ms"
            if i == 0:
                print(name, "rows", len(db.execute(query).fetchall()), plan[-1])
    for name, values in times.items():
        print(name, "median ms", statistics.median(values), "min", min(values))


if __name__ == "__main__":
    main()
