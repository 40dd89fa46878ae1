"""SegmentGenerator, TagHandle and TagStats from Python."""

from __future__ import annotations

import threading

import pytest

import leafid


def test_ids_start_at_the_tags_start_and_increase(sqlite_url: str) -> None:
    with leafid.SegmentGenerator(sqlite_url) as gen:
        gen.create_tag("order", start=100, step=10, description="orders")
        h = gen.tag("order")
        assert h.tag == "order"
        assert [next(h) for _ in range(3)] == [100, 101, 102]
        assert h.next_id() == 103
        assert gen.next_id("order") == 104
        assert gen.next_ids("order", 20) == list(range(105, 125))
        assert h.next_ids(2) == [125, 126]
        assert gen.tags() == ["order"]


def test_handle_is_an_endless_iterator(sqlite_url: str) -> None:
    gen = leafid.SegmentGenerator(sqlite_url)
    gen.create_tag("t", step=5)
    ids = []
    for i, id_ in enumerate(gen.tag("t")):
        ids.append(id_)
        if i == 11:
            break
    assert ids == list(range(1, 13))


def test_stats_show_both_segments(sqlite_url: str) -> None:
    gen = leafid.SegmentGenerator(sqlite_url)
    gen.create_tag("t", step=100)
    gen.next_ids("t", 50)
    (s,) = gen.stats()
    assert isinstance(s, leafid.TagStats)
    assert s.tag == "t" and s.initialized and s.step == 100 and s.min_step == 100
    assert s.refills >= 1 and s.last_refill is not None and s.last_error is None
    assert len(s.segments) == 2 and s.current in (0, 1)
    value, max_, step = s.segments[s.current]
    assert (value, max_, step) == (51, 101, 100)


def test_stats_repr_shows_python_values_and_ids_are_ints(sqlite_url: str) -> None:
    # Issue 21: the repr printed Rust's `false`; now every field, as Python shows it.
    gen = leafid.SegmentGenerator(sqlite_url)
    gen.create_tag("t", step=100)
    gen.next_id("t")
    (s,) = gen.stats()
    text = repr(s)
    assert text.startswith("TagStats(tag='t', initialized=True, ")
    assert "next_ready=False" in text and "last_error=None" in text
    assert "true" not in text and "false" not in text
    assert all(type(v) is int for seg in s.segments for v in seg)
    assert repr(gen.tag("t")) == "TagHandle(tag='t')"
    assert repr(leafid.Layout.js_safe()) == (
        "Layout(timestamp_bits=41, worker_bits=3, sequence_bits=9, epoch_ms=1288834974657)")


def test_a_tag_created_elsewhere_works_on_first_use(sqlite_url: str) -> None:
    a = leafid.SegmentGenerator(sqlite_url)
    b = leafid.SegmentGenerator(sqlite_url)
    a.create_tag("new")
    # Not in b's cache yet: the miss is looked up in the store (issue 12).
    assert b.next_id("new") > 0
    b.refresh()
    assert "new" in b.tags()


def test_bad_input_is_refused_with_clear_errors(sqlite_url: str) -> None:
    gen = leafid.SegmentGenerator(sqlite_url)
    with pytest.raises(leafid.InvalidTag) as e:
        gen.next_id("")
    assert isinstance(e.value, ValueError) and e.value.code == "LEAF_INVALID_TAG"
    with pytest.raises(leafid.InvalidTag):
        gen.tag("x" * 129)
    with pytest.raises(leafid.TagNotFound) as nf:
        gen.next_id("missing")
    assert isinstance(nf.value, KeyError) and "create_tag" in str(nf.value)
    with pytest.raises(leafid.InvalidConfig):
        gen.create_tag("bad", step=0)
    gen.create_tag("dup")
    with pytest.raises(leafid.TagExists):
        gen.create_tag("dup")
    gen.create_tag("dup", start=500, exist_ok=True)  # accepted, and left as it was
    assert gen.next_id("dup") == 1
    with pytest.raises(leafid.InvalidUrl):
        leafid.SegmentGenerator("oracle://nowhere")
    with pytest.raises(leafid.InvalidConfig):
        leafid.SegmentGenerator(sqlite_url, wait_timeout=-1)


def test_closed_generator_refuses_calls(sqlite_url: str) -> None:
    gen = leafid.SegmentGenerator(sqlite_url)
    gen.create_tag("t")
    h = gen.tag("t")
    next(h)
    gen.close()
    with pytest.raises(leafid.Closed):
        next(h)


def test_mysql_threads_never_share_an_id(mysql_url: str, tag: str) -> None:
    # A refill may take long on a loaded machine; waiting is fine, a duplicate is not.
    gen = leafid.SegmentGenerator(mysql_url, create_table=True, wait_timeout=30.0)
    gen.create_tag(tag, step=100)
    results: list[list[int]] = []

    def work() -> None:
        h = gen.tag(tag)
        results.append([next(h) for _ in range(20_000)])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for r in results for i in r]
    assert len(ids) == len(set(ids)) == 160_000
    assert all(r == sorted(r) for r in results)


def test_mysql_threads_with_thread_chunks_never_share_an_id(mysql_url: str, tag: str) -> None:
    # The chunked form: each thread's ids increase, all are unique, across a second
    # generator (another process's cursor) on the same tag; single calls and batches mixed.
    gen = leafid.SegmentGenerator(mysql_url, create_table=True, wait_timeout=30.0, thread_chunk=64)
    other = leafid.SegmentGenerator(mysql_url, wait_timeout=30.0, thread_chunk=64)
    gen.create_tag(tag, step=100)
    results: list[list[int]] = []

    def work(g: leafid.SegmentGenerator) -> None:
        h = g.tag(tag)
        mine: list[int] = []
        for _ in range(500):
            mine.extend(next(h) for _ in range(20))
            mine.extend(h.next_ids(7))
        results.append(mine)

    threads = [threading.Thread(target=work, args=(g,)) for g in (gen, other) * 3]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for r in results for i in r]
    assert len(ids) == len(set(ids)) == 6 * 500 * 27
    assert all(r == sorted(r) for r in results)
    with pytest.raises(leafid.InvalidConfig, match="thread_chunk 4097"):
        leafid.SegmentGenerator("memory:", thread_chunk=4097)
    gen.close()
    other.close()


def test_missing_table_names_the_keyword_create_table_true(mysql_url: str) -> None:
    base, _ = mysql_url.rsplit("/", 1)
    gen = leafid.SegmentGenerator(mysql_url, create_table=True)
    del gen
    # The `mysql` system database exists on every server and has no leaf_alloc.
    with pytest.raises(leafid.TableMissing) as e:
        leafid.SegmentGenerator(f"{base}/mysql")
    # Issue 31: Python's way (the constructor's keyword), not the core's Rust builder.
    assert "create_table=True" in str(e.value)
    assert "SegmentOptions" not in str(e.value)


def test_down_database_is_store_unavailable() -> None:
    with pytest.raises(leafid.StoreUnavailable):
        leafid.SegmentGenerator("mysql://root:x@127.0.0.1:1/leafid")


def test_next_ids_array_gives_int64_array(sqlite_url: str) -> None:
    gen = leafid.SegmentGenerator(sqlite_url)
    gen.create_tag("t", step=7)
    a = gen.tag("t").next_ids_array(20)
    assert a.typecode == "q" and list(a) == list(range(1, 21))
