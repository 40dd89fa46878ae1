"""Run by tests/python/test_frameworks.py in a fresh interpreter (Django configures
itself once per process): makes the app's table in a database of the test's own, forks
4 worker processes that insert 2 500 rows each through the framework (single inserts
and bulk inserts), and prints, as JSON, the ids each worker's rows got from leafid.

    python orm_workers.py django|sqlalchemy|sqlalchemy-async LEAF_URL
"""

import asyncio
import json
import multiprocessing
import sys
import traceback
from typing import Any, Callable, List
from urllib.parse import urlsplit

import leafid

WORKERS = 4
ROWS = 2_500  # per worker: half one by one, half in bulk inserts
STEP = 2_000


def sqlalchemy_url(leaf_url: str, asynchronous: bool) -> str:
    u = urlsplit(leaf_url)
    if u.scheme == "mysql":
        driver = "mysql+aiomysql" if asynchronous else "mysql+pymysql"
    else:
        driver = "postgresql+asyncpg" if asynchronous else "postgresql+psycopg"
    return f"{driver}://{u.netloc}{u.path}"


def _report(queue: Any, work: Callable[[], List[int]]) -> None:
    # Every worker puts one result, its ids or its traceback, so the parent never waits
    # for one that died.
    try:
        queue.put(work())
    except BaseException:
        queue.put(traceback.format_exc())


def run_workers(work: Callable[[], List[int]]) -> List[List[int]]:
    # fork, as gunicorn --preload and a Celery prefork pool do: the workers inherit
    # whatever the parent made (a generator included).
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=_report, args=(queue, work)) for _ in range(WORKERS)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    errors = [r for r in results if isinstance(r, str)]
    assert not errors, errors[0]
    for p in procs:
        p.join()
        assert p.exitcode == 0, p.exitcode
    return results


def django_main(leaf_url: str) -> List[List[int]]:
    import django
    from django.conf import settings

    u = urlsplit(leaf_url)
    engine = "mysql" if u.scheme == "mysql" else "postgresql"
    if engine == "mysql":
        import pymysql

        pymysql.install_as_MySQLdb()
        # Django checks mysqlclient's version; PyMySQL reports its own.
        pymysql.version_info = (2, 2, 7, "final", 0)  # type: ignore[attr-defined]
    settings.configure(
        DATABASES={"default": {
            "ENGINE": f"django.db.backends.{engine}", "NAME": u.path.lstrip("/"),
            "USER": u.username, "PASSWORD": u.password, "HOST": u.hostname, "PORT": u.port}},
        INSTALLED_APPS=[], USE_TZ=True,
        LEAFID={"url": leaf_url, "wait_timeout": 10.0},
    )
    django.setup()
    from django.db import connection, connections, models

    import leafid.django

    class Order(models.Model):
        id = leafid.django.LeafIdField(tag="order", primary_key=True)
        total = models.IntegerField()

        class Meta:
            app_label = "shop"
            db_table = "orders"

    with connection.schema_editor() as editor:
        editor.create_model(Order)
    # As a preload master that touched the generator (a data migration creating the
    # tag): the workers go on with the generator they inherit.
    leafid.django.generator().create_tag("order", start=1, step=STEP, exist_ok=True)
    connections.close_all()  # each worker opens its own

    def work() -> List[int]:
        ids = [Order.objects.create(total=n).id for n in range(ROWS // 2)]
        for _ in range(5):
            batch = [Order(total=n) for n in range(ROWS // 10)]
            Order.objects.bulk_create(batch, batch_size=100)
            ids += [o.id for o in batch]
        connections.close_all()
        return ids

    return run_workers(work)


def sqlalchemy_main(leaf_url: str, asynchronous: bool) -> List[List[int]]:
    from sqlalchemy import BigInteger, Integer, create_engine, insert
    from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

    # The recipe of docs/frameworks-python.md: the handle made on first use, in the
    # process that uses it; `issued` records what leafid gave, to compare with the table.
    handle: List[leafid.TagHandle] = []
    issued: List[int] = []

    def orders() -> leafid.TagHandle:
        if not handle:
            handle.append(leafid.SegmentGenerator(leaf_url, wait_timeout=10.0).tag("order"))
        return handle[0]

    def order_id() -> int:
        i = orders().next_id()
        issued.append(i)
        return i

    class Base(DeclarativeBase):
        pass

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, default=order_id)
        total: Mapped[int] = mapped_column(Integer)

    setup = create_engine(sqlalchemy_url(leaf_url, False))
    Base.metadata.create_all(setup)
    setup.dispose()
    with leafid.SegmentGenerator(leaf_url) as admin:
        admin.create_tag("order", start=1, step=STEP, exist_ok=True)

    def work() -> List[int]:
        engine = create_engine(sqlalchemy_url(leaf_url, False))
        with Session(engine) as session:
            for n in range(ROWS // 2):
                session.add(Order(total=n))
                session.commit()
            session.add_all([Order(total=n) for n in range(ROWS // 4)])  # one flush
            session.commit()
            session.execute(insert(Order), [{"total": n} for n in range(ROWS // 4)])
            session.commit()
        engine.dispose()
        return issued

    async def work_async() -> List[int]:
        from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

        engine = create_async_engine(sqlalchemy_url(leaf_url, True))
        async with AsyncSession(engine) as session:
            for n in range(ROWS // 2):
                session.add(Order(total=n))
                await session.commit()
            # A bulk insert with its ids reserved first, off the event loop's thread.
            reserved = await orders().next_ids_async(ROWS // 4)
            issued.extend(reserved)
            session.add_all([Order(id=i, total=0) for i in reserved])
            await session.commit()
            await session.execute(insert(Order), [{"total": n} for n in range(ROWS // 4)])
            await session.commit()
        await engine.dispose()
        return issued

    return run_workers((lambda: asyncio.run(work_async())) if asynchronous else work)


def main() -> None:
    framework, leaf_url = sys.argv[1], sys.argv[2]
    with leafid.SegmentGenerator(leaf_url, create_table=True):
        pass
    result: Any
    if framework == "django":
        result = django_main(leaf_url)
    else:
        result = sqlalchemy_main(leaf_url, framework == "sqlalchemy-async")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
