"""The viewer's share of agentlog.telemetry: ``/metrics`` and the health page's figures.

Both read what ``agentlog serve --metrics`` enabled
(:func:`agentlog.telemetry.prometheus.enable`); without it ``/metrics`` is
not found and the health page shows the store's own figures alone.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["health_figures", "metrics_routes"]


def _metrics() -> Any:
    try:
        from ..telemetry.prometheus import active
    except ImportError:  # without the prometheus extra
        return None
    return active()


def health_figures(log: Any) -> dict[str, Any]:
    """The store's monitoring figures (SQLite's ``figures()``, or None) and,
    with ``--metrics``, every sample ``/metrics`` answers (else None)."""
    figures = getattr(log, "figures", None)
    metrics = _metrics()
    return {
        "figures": None if figures is None else figures(),
        "metrics": None if metrics is None else metrics.samples(),
    }


async def _scrape(request: Request) -> Response:
    metrics = _metrics()
    if metrics is None:
        return Response("no metrics: start agentlog serve with --metrics\n", status_code=404)
    return Response(metrics.text(), media_type=metrics.content_type)


def metrics_routes() -> list[Route]:
    """``GET /metrics``: Prometheus' text format."""
    return [Route("/metrics", _scrape)]
