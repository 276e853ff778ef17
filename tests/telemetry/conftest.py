"""The telemetry tests' fixture: agentlog instrumented with the OpenTelemetry
SDK's in-memory span exporter and metric reader, undone after the test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the telemetry tests need opentelemetry-sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentlog import telemetry


@dataclass
class Telemetry:
    """What the instrumented code exported, read back."""

    tracer_provider: TracerProvider
    spans_exporter: InMemorySpanExporter
    reader: InMemoryMetricReader

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.spans_exporter.get_finished_spans())
        return [span for span in found if name is None or span.name == name]

    def points(self, metric: str) -> list[Any]:
        """The data points of ``metric`` (none if it recorded nothing)."""
        data = self.reader.get_metrics_data()
        if data is None:
            return []
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for found in scope.metrics
            if found.name == metric
            for point in found.data.data_points
        ]

    def total(self, metric: str, **attributes: str) -> float:
        """The sum of ``metric``'s points whose attributes include ``attributes``
        (a histogram's count)."""
        total = 0.0
        for point in self.points(metric):
            if all(point.attributes.get(k) == v for k, v in attributes.items()):
                total += getattr(point, "value", None) if hasattr(point, "value") else point.count
        return total


def make_telemetry(**options: Any) -> Telemetry:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.instrument(tracer_provider, meter_provider, **options)
    return Telemetry(tracer_provider, exporter, reader)


@pytest.fixture
def otel() -> Iterator[Telemetry]:
    """agentlog instrumented for this test (record_ids on, to assert them)."""
    try:
        yield make_telemetry(record_ids=True)
    finally:
        telemetry.uninstrument()
