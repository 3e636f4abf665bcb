"""Metric series of a run, read from the ledger's metrics rows and downsampled per key
(:mod:`web.downsample`); shared by the metrics API and the run page's charts.

Reading a long run's rows is the expensive part (100,000 rows take about 2 s through
``Ledger.metrics`` on SQLite), so series are cached per log size: a live run's page,
reloaded every few seconds, reads the rows once per new outer step.
"""

from __future__ import annotations

from itertools import groupby

from ledger.records import MetricPoint
from ledger.service import Ledger
from web.downsample import downsample
from web.schemas import MetricSeries
from web.size_cache import SizeKeyedCache

CACHE_ENTRIES = 64


class SeriesCache:
    """:func:`metric_series` results by (run, log size, keys, max_points)."""

    def __init__(self, capacity: int = CACHE_ENTRIES) -> None:
        self._series: SizeKeyedCache[list[MetricSeries]] = SizeKeyedCache(capacity)

    def series(
        self, ledger: Ledger, run: str, keys: list[str] | None, max_points: int | None
    ) -> list[MetricSeries]:
        size = ledger.get_run(run).size
        wanted = None if keys is None else tuple(sorted(set(keys)))
        return self._series.get(
            (run, size, wanted, max_points), lambda: metric_series(ledger, run, keys, max_points)
        )


def metric_series(
    ledger: Ledger, run: str, keys: list[str] | None, max_points: int | None
) -> list[MetricSeries]:
    """The series of ``run`` (ordered by key), each downsampled to ``max_points``."""
    wanted = sorted(set(keys)) if keys else None
    points = ledger.metrics(run, wanted)
    by_key: dict[str, list[MetricPoint]] = {
        name: list(group) for name, group in groupby(points, key=lambda p: p.key)
    }
    series = []
    for name in wanted if wanted is not None else sorted(by_key):
        recorded = by_key.get(name, [])
        kept = recorded
        if max_points is not None:
            kept = downsample(recorded, [p.value for p in recorded], max_points)
        series.append(
            MetricSeries(
                key=name,
                total=len(recorded),
                downsampled=len(kept) < len(recorded),
                steps=[p.step for p in kept],
                values=[p.value for p in kept],
                entries=[p.entry_index for p in kept],
            )
        )
    return series
