"""``leafid.metrics_text()``: Prometheus text that Prometheus's own parsers accept, with
the families of every live generator and values that follow what was issued."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_prometheus
from prometheus_client.samples import Sample

import leafid


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample by (name, labels), through the strict OpenMetrics parser; the
    classic Prometheus text parser must accept the same text too."""
    families = list(parse_openmetrics(text))
    assert list(parse_prometheus(text)), "the Prometheus text parser reads it too"
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in families:
        assert family.name.startswith("leafid_"), family.name
        for s in family.samples:
            assert isinstance(s, Sample)
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def types(text: str) -> dict[str, str]:
    return {f.name: f.type for f in parse_openmetrics(text)}


def value(m: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in m, f"{name}{labels} missing; have {sorted(k for k in m if k[0] == name)}"
    return m[key]


def tag_not_found_errors() -> float:
    m = samples(leafid.metrics_text())
    return m.get(("leafid_errors_total", frozenset({("mode", "segment"), ("code", "LEAF_TAG_NOT_FOUND")})), 0.0)


@pytest.fixture
def segment(tmp_path: Path) -> Iterator[leafid.SegmentGenerator]:
    with leafid.SegmentGenerator(f"sqlite://{tmp_path}/ids.db") as gen:
        gen.create_tag("py_metrics", start=1, step=10)
        yield gen


def test_segment_ids_issued_per_tag_equal_the_ids_taken(segment: leafid.SegmentGenerator) -> None:
    handle = segment.tag("py_metrics")
    taken = [segment.next_id("py_metrics") for _ in range(7)]
    taken += segment.next_ids("py_metrics", 11)
    taken += [next(handle) for _ in range(7)]
    assert len(set(taken)) == 25

    text = leafid.metrics_text()
    m = samples(text)
    t = types(text)
    assert value(m, "leafid_segment_ids_issued_total", tag="py_metrics") == 25
    assert t["leafid_segment_ids_issued"] == "counter"
    refills = value(m, "leafid_segment_refills_total", tag="py_metrics")
    assert refills >= 3  # 25 ids from segments of 10 and up
    assert value(m, "leafid_segment_initialized", tag="py_metrics") == 1
    assert value(m, "leafid_segment_step", tag="py_metrics") >= 10
    assert value(m, "leafid_segment_next_ready", tag="py_metrics") in (0, 1)
    assert value(m, "leafid_segment_remaining_ids", tag="py_metrics") >= 1
    # The refill latency histogram: every load in the +Inf bucket and in the count.
    assert t["leafid_segment_refill_duration_seconds"] == "histogram"
    assert value(m, "leafid_segment_refill_duration_seconds_bucket", tag="py_metrics", le="+Inf") == refills
    assert value(m, "leafid_segment_refill_duration_seconds_count", tag="py_metrics") == refills
    assert value(m, "leafid_segment_refill_duration_seconds_sum", tag="py_metrics") > 0


def test_errors_are_counted_by_mode_and_code(segment: leafid.SegmentGenerator) -> None:
    before = tag_not_found_errors()
    with pytest.raises(leafid.TagNotFound):
        segment.next_id("py_metrics_no_such_tag")
    assert tag_not_found_errors() == before + 1


def test_snowflake_ids_issued_and_lease_per_worker(tmp_path: Path) -> None:
    with leafid.SnowflakeGenerator("fixed:904", cache_dir=tmp_path) as sf:
        for _ in range(3000):
            sf.next_id()
        assert len(sf.next_ids(2000)) == 2000
        m = samples(leafid.metrics_text())
        assert value(m, "leafid_snowflake_ids_issued_total", worker_id="904") == 5000
        states = {s: value(m, "leafid_snowflake_lease_state", worker_id="904", state=s) for s in ("held", "late", "acquiring", "lost", "forked", "closed")}
        assert states == {"held": 1, "late": 0, "acquiring": 0, "lost": 0, "forked": 0, "closed": 0}
        assert value(m, "leafid_snowflake_bound_lead_seconds", worker_id="904") > 0
        assert value(m, "leafid_snowflake_clock_backward_max_seconds", worker_id="904") >= 0
    # Closed: the worker's series are gone.
    assert 'worker_id="904"' not in leafid.metrics_text()


class LeafidCollector:
    """The README's collector, for a service that already serves prometheus_client."""

    def collect(self) -> Iterator[object]:
        yield from parse_openmetrics(leafid.metrics_text())


def test_a_prometheus_client_registry_serves_leafid_families(segment: leafid.SegmentGenerator) -> None:
    from prometheus_client import CollectorRegistry, generate_latest

    for _ in range(3):
        segment.next_id("py_metrics")
    registry = CollectorRegistry()
    registry.register(LeafidCollector())  # type: ignore[arg-type]
    out = generate_latest(registry).decode()
    assert 'leafid_segment_ids_issued_total{tag="py_metrics"} 3.0' in out, out


def test_odd_tags_parse_strictly_and_keep_their_names(segment: leafid.SegmentGenerator) -> None:
    # Review: a tag with a quote, backslash or newline broke the scrape or added series.
    odd = ['say "hi"', "end\\", 'x"} 1\nleafid_injected_total{a="b"} 42\n# EOF\nz{tag="']
    for tag in odd:
        segment.create_tag(tag, start=1, step=10)
        segment.next_id(tag)
    m = samples(leafid.metrics_text())
    for tag in odd:
        assert value(m, "leafid_segment_ids_issued_total", tag=tag) == 1
    assert not [k for k in m if k[0].startswith("leafid_injected")]
