"""CPU per new trial row: the ORM's flush (INSERT ... RETURNING of every row's values) against
Core's executemany of one INSERT with the ids drawn first (what a scheduling step does since
7779cea), and Core with RETURNING, on a fresh Postgres database; 60 transactions of 40 rows
each, rolled back.

    .venv/bin/python bench/results/restructure_2026-12-06/insert_rows.py

Printed on 2026-12-06 (2-core machine), in ms of CPU per row (the first figure includes warming up):
quiet, orm 0.172, core 0.024, orm 0.142, core 0.024, core returning 0.068; again beside the test
suite, orm 0.164, core 0.032, orm 0.153, core 0.031, core returning 0.067.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, text
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from helpers import create_postgres_database, drop_postgres_database  # noqa: E402

from service.store.models import TRIALS, Base, Trial  # noqa: E402

ROWS, TRANSACTIONS = 40, 60


def row(number: int) -> dict[str, Any]:
    return dict(study_id=None, number=number, state="queued", seq=number, pool="default", backend="python",
                requires_energy=False, requires_gpu=False, stage=None, is_baseline=False,
                config={"x": 0.5, "y": 3}, sampler_state={"a": 1}, max_attempts=3)


def once(session: Session, mode: str, first: int) -> None:
    rows = [row(first + i) for i in range(ROWS)]
    if mode == "orm":
        session.add_all([Trial(**r) for r in rows])
        session.flush()
    elif mode == "core":
        ids = session.execute(text("SELECT nextval(pg_get_serial_sequence('trials', 'id')) "
                                   "FROM generate_series(1, :n)"), {"n": ROWS}).scalars()
        session.execute(insert(TRIALS), [{**r, "id": i} for r, i in zip(rows, ids, strict=True)])
    else:
        session.execute(insert(TRIALS).returning(TRIALS.c.id, sort_by_parameter_order=True), rows).all()


def main() -> None:
    url = create_postgres_database()
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        Base.metadata.create_all(engine)
        with Session(engine) as session:  # rows of no study
            session.execute(text("ALTER TABLE trials DROP CONSTRAINT IF EXISTS trials_study_id_fkey"))
            session.execute(text("ALTER TABLE trials ALTER COLUMN study_id DROP NOT NULL"))
            session.commit()
        for mode in ("orm", "core", "orm", "core", "core returning"):
            cpu = 0.0
            for t in range(TRANSACTIONS):
                with Session(engine) as session:
                    started = time.process_time()
                    once(session, mode, t * ROWS)
                    cpu += time.process_time() - started
                    session.rollback()
            print(mode, f"{cpu / TRANSACTIONS / ROWS * 1e3:.3f} ms of CPU per row")
    finally:
        engine.dispose()
        drop_postgres_database(url)


if __name__ == "__main__":
    main()
