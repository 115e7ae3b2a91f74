"""``/metrics``: the engine's figures in Prometheus's text format, through prometheus-client.

Per query (label ``query``): ``splice_query_rows_in_total``, ``splice_query_rows_out_total``,
``splice_query_late_rows_total``, ``splice_query_state_bytes``, ``splice_query_watermark``,
``splice_query_watermark_lag``, ``splice_query_rows_out_per_second``. Per unit (labels
``brick``, ``unit``, ``query``): ``splice_unit_rows_in_total``, ``splice_unit_rows_out_total``,
``splice_unit_busy_seconds_total``, ``splice_unit_queue_fill``. Engine-wide:
``splice_dead_letter_rows_total``, ``splice_checkpoints_total``,
``splice_checkpoint_last_seconds``, ``splice_checkpoint_last_bytes``. Each scrape reads the
engine afresh (a custom collector on a registry of its own).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from splice.web.service import EngineService

__all__ = ["metrics_text"]


class _EngineCollector:
    def __init__(self, service: EngineService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        queries = self.service.queries()
        per_query: list[tuple[str, str, type[Any], str]] = [
            ("rows_in", "rows that reached the query", CounterMetricFamily, "rows_in"),
            ("rows_out", "result rows", CounterMetricFamily, "rows_out"),
            ("late_rows", "rows behind the watermark", CounterMetricFamily, "late_rows"),
            ("state_bytes", "bytes of operator state", GaugeMetricFamily, "state_bytes"),
            ("watermark", "the query's input watermark", GaugeMetricFamily, "watermark"),
            ("watermark_lag", "largest time seen minus the watermark", GaugeMetricFamily,
             "watermark_lag"),
            ("rows_out_per_second", "result rows per second, last sample", GaugeMetricFamily,
             "rows_out_per_s"),
        ]
        for metric, doc, family, key in per_query:
            m = family(f"splice_query_{metric}", doc, labels=["query"])
            for q in queries:
                if q[key] is not None:
                    m.add_metric([q["name"]], float(q[key]))
            yield m
        topo = self.service.topology()
        per_unit = [("rows_in", CounterMetricFamily, "rows_in"),
                    ("rows_out", CounterMetricFamily, "rows_out"),
                    ("busy_seconds", CounterMetricFamily, "busy_s"),
                    ("queue_fill", GaugeMetricFamily, "queue_fill")]
        for metric, family, key in per_unit:
            m = family(f"splice_unit_{metric}", f"processing unit {metric.replace('_', ' ')}",
                       labels=["brick", "unit", "query"])
            for b in topo["bricks"]:
                for u in b["units"]:
                    m.add_metric([str(b["brick"]), str(u["unit"]), u["query"] or ""],
                                 float(u[key]))
            yield m
        dead = CounterMetricFamily("splice_dead_letter_rows", "rows set aside as bad input")
        dead.add_metric([], float(queries[0]["dead_letter_rows"]) if queries else 0.0)
        yield dead
        ck = self.service.checkpoints()
        count = CounterMetricFamily("splice_checkpoints", "checkpoints completed")
        count.add_metric([], float(ck["count"]))
        yield count
        for metric, key in (("last_seconds", "last_seconds"), ("last_bytes", "last_bytes")):
            g = GaugeMetricFamily(f"splice_checkpoint_{metric}", f"the last checkpoint's {metric}")
            if ck.get(key) is not None:
                g.add_metric([], float(ck[key]))
            yield g


def metrics_text(service: EngineService) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_EngineCollector(service))  # type: ignore[arg-type]
    return generate_latest(registry)
