"""CPU of the fair-share view's usage read per refresh, every row of the window against the
settled hours summed (service.trials.shares.SettledUsage), with 400 studies' use over 1 and
over 24 hours, on a fresh Postgres database:

    .venv/bin/python bench/results/lease_scale_2026-12-06/usage_read.py

Printed on 2026-12-06 (2-core machine), ms of CPU per refresh (mean of ten, after a first), two
runs: 1 hour (400 rows): every row 3.4 and 1.9, settled summed 2.2 and 1.8; 24 hours (9,600
rows): every row 43.1 and 42.3, settled summed 6.1 and 5.7 (its sums are made again once every
SETTLED_S, which this leaves out).
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from pathlib import Path

from sqlalchemy import create_engine, insert, text
from sqlalchemy.orm import Session

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
from helpers import create_postgres_database, drop_postgres_database  # noqa: E402

from service.store.models import Base, PoolUsage, utcnow  # noqa: E402
from service.trials import shares  # noqa: E402

STUDIES = 400


def main() -> None:
    url = create_postgres_database()
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        Base.metadata.create_all(engine)
        with Session(engine) as session:  # usage rows of no real study or team
            session.execute(text("ALTER TABLE pool_usage DROP CONSTRAINT IF EXISTS pool_usage_team_id_fkey"))
            session.execute(text("ALTER TABLE pool_usage DROP CONSTRAINT IF EXISTS pool_usage_study_id_fkey"))
            session.commit()
        hour = utcnow().replace(minute=0, second=0, microsecond=0)
        for hours in (1, 24):
            rows = [{"pool": "default", "study_id": study, "hour": hour - timedelta(hours=h), "team_id": 1 + study % 4,
                     "gpu_s": 10.0, "trials": 5} for study in range(1, STUDIES + 1) for h in range(hours)]
            with Session(engine) as session:
                session.execute(PoolUsage.__table__.delete())
                session.execute(insert(PoolUsage), rows)
                session.commit()
            for mode in ("every row", "settled summed"):
                settled = shares.SettledUsage() if mode == "settled summed" else None
                with Session(engine) as session:
                    shares._add_usage(session, {}, utcnow(), None, settled)
                    started = time.thread_time()
                    for _ in range(10):
                        shares._add_usage(session, {}, utcnow(), None, settled)
                    cpu_ms = (time.thread_time() - started) * 100
                print(f"{hours} hours x {STUDIES} studies, {len(rows)} rows: {mode} {cpu_ms:.1f} ms of CPU per refresh")
    finally:
        engine.dispose()
        drop_postgres_database(url)


if __name__ == "__main__":
    main()
