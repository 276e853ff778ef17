"""agentlog's metrics in Prometheus' text format, for a host that scrapes.

Needs ``pip install "agentlog[prometheus]"`` (the OpenTelemetry SDK collects,
``prometheus_client`` writes the text). :func:`enable` instruments agentlog
(:func:`agentlog.telemetry.instrument`) with a meter provider of its own and
returns a :class:`PrometheusMetrics`: its :meth:`~PrometheusMetrics.text` is
what ``/metrics`` answers, and it is an ASGI app that answers it (mount it at
``/metrics``). ``agentlog serve --metrics`` does so, and its health page shows
the same figures.

Names are OpenTelemetry's with dots as underscores and the unit appended
(``db.client.operation.duration`` in seconds is
``db_client_operation_duration_seconds``); a counter ends in ``_total``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    InMemoryMetricReader,
    Metric,
    Sum,
)
from opentelemetry.trace import TracerProvider
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.core import (
    Metric as PrometheusMetric,
)
from prometheus_client.registry import Collector

from . import instrument, instrumented

__all__ = ["PrometheusMetrics", "active", "enable"]

_UNITS = {"s": "seconds", "By": "bytes", "ms": "milliseconds"}

_active: PrometheusMetrics | None = None


def _name(name: str, unit: str) -> str:
    base = re.sub(r"[^a-zA-Z0-9_]", "_", name)
    suffix = _UNITS.get(unit, "")
    return f"{base}_{suffix}" if suffix and not base.endswith(suffix) else base


def _label(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _family(metric: Metric) -> PrometheusMetric | None:
    """One OpenTelemetry metric as a Prometheus metric family (None: no points)."""
    data: Any = metric.data
    points: list[Any] = list(data.data_points)
    if not points:
        return None
    keys = sorted({key for point in points for key in (point.attributes or {})})
    labels = [_label(key) for key in keys]
    name = _name(metric.name, metric.unit or "")
    help_text = metric.description or metric.name

    def values(point: Any) -> list[str]:
        attributes = point.attributes or {}
        return [str(attributes.get(key, "")) for key in keys]

    if isinstance(data, Histogram):
        family: PrometheusMetric = HistogramMetricFamily(name, help_text, labels=labels)
        for point in points:
            cumulative = 0
            buckets = []
            for bound, count in zip(point.explicit_bounds, point.bucket_counts, strict=False):
                cumulative += count
                buckets.append((repr(float(bound)), float(cumulative)))
            buckets.append(("+Inf", float(point.count)))
            family.add_metric(values(point), buckets, float(point.sum))  # type: ignore[attr-defined]
        return family
    if isinstance(data, Sum) and data.is_monotonic:
        family = CounterMetricFamily(name, help_text, labels=labels)
    elif isinstance(data, (Sum, Gauge)):
        family = GaugeMetricFamily(name, help_text, labels=labels)
    else:
        return None
    for point in points:
        family.add_metric(values(point), float(point.value))
    return family


class _Collector(Collector):
    def __init__(self, reader: InMemoryMetricReader) -> None:
        self._reader = reader

    def collect(self) -> Iterator[PrometheusMetric]:
        data = self._reader.get_metrics_data()
        if data is None:
            return
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    family = _family(metric)
                    if family is not None:
                        yield family


class PrometheusMetrics:
    """agentlog's metrics, collected by an SDK meter provider of their own.

    An ASGI app: every GET it answers with :meth:`text` (mount it at
    ``/metrics``).
    """

    #: The ``Content-Type`` of :meth:`text`.
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self.reader))

    def text(self) -> bytes:
        """Every figure now, in Prometheus' text exposition format."""
        return generate_latest(self.registry)

    def samples(self) -> list[dict[str, Any]]:
        """The figures of :meth:`text` as ``{"name", "labels", "value"}`` rows
        (what ``agentlog serve``'s health page shows)."""
        return [
            {"name": sample.name, "labels": dict(sample.labels), "value": sample.value}
            for family in self.registry.collect()
            for sample in family.samples
        ]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = self.text()
        headers = [(b"content-type", self.content_type.encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def shutdown(self) -> None:
        """Stop collecting (the meter provider shuts down)."""
        self.meter_provider.shutdown()


def enable(tracer_provider: TracerProvider | None = None, **options: Any) -> PrometheusMetrics:
    """Instrument agentlog (``options`` as :func:`agentlog.telemetry.instrument`
    takes them) with metrics for Prometheus; return them (also :func:`active`)."""
    global _active
    found = PrometheusMetrics()
    instrument(tracer_provider, found.meter_provider, **options)
    _active = found
    return found


def active() -> PrometheusMetrics | None:
    """The metrics :func:`enable` made last in this process, or None (also
    once :func:`agentlog.telemetry.uninstrument` has undone it)."""
    return _active if instrumented() else None
