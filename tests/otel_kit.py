"""The OpenTelemetry SDK with in-memory export, for the tests that read what is recorded.

The API takes one global tracer and meter provider per process, so they are installed
once (:func:`recording`) and stay; between tests telemetry is turned off, so that later
tests in the same process (their exact ``_meta``, their headers) run as a host without
an SDK would, with nothing recorded nor sent.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from albedo_actors.wire import telemetry

EXPORTER = InMemorySpanExporter()
READER = InMemoryMetricReader()
_installed: list[bool] = []


@contextlib.contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    """Telemetry on, to the in-memory exporter and reader, with no spans yet; the
    defaults otherwise (recording content off)."""
    if not _installed:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
        metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
        _installed.append(True)
    EXPORTER.clear()
    telemetry.configure(enabled=True)
    try:
        yield EXPORTER
    finally:
        telemetry.configure(enabled=False, record_content=False, merge_tool_span=False)


def points_of(name: str) -> list:
    """The data points of metric ``name`` so far (cumulative, the SDK's default)."""
    found = []
    data = READER.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    assert metric.unit == ("s" if name.endswith(".duration") else "")
                    found.extend(metric.data.data_points)
    return found


def counted(name: str, server: str) -> int:
    """The sum of counter ``name`` for ``server`` so far."""
    return sum(point.value for point in points_of(name) if point.attributes.get("mcp.server.name") == server)
