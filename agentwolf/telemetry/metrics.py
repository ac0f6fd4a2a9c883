"""AgentWolf's metrics, recorded through the Temporal runtime's metric meter, so `--metrics-port`
serves them on the same Prometheus endpoint as Temporal's own (`serve(port)` before connecting).

Recording one is one line, from workflow code, an activity or anywhere in the worker:

    metrics.count(metrics.TOKENS, 120, model="gpt-4o-mini", tenant="acme", kind="input")
    metrics.observe(metrics.TOOL_SECONDS, 0.042, server="time", tool="get_current_time", outcome="ok")
    metrics.gauge(metrics.MCP_PROCESSES, 3)

A new metric is one `Metric` constant below. The meter is chosen for where the call runs: in a
workflow `workflow.metric_meter()` (it records nothing while replaying, so counts stay exact), in an
activity `activity.metric_meter()` (with its namespace, task queue and activity type), elsewhere the
runtime's. Counters take non-negative ints (count money in micro-units, or use a float histogram);
histograms and gauges take floats. With no `--metrics-port` every call is a no-op meter's.

Names follow Prometheus' conventions: the endpoint appends `_total` to every counter (Temporal's
too), units are spelt in the names (`_seconds`, `_usd`: the runtime's own unit suffix would append
the raw unit, `_s`), and a `model` label is always the resolved spec that answered
(`provider:model`, what `wolf usage --by model` groups by).
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import activity, workflow
from temporalio.common import MetricMeter
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig


@dataclass(frozen=True)
class Metric:
    name: str
    description: str
    unit: str | None = None
    buckets: tuple[float, ...] | None = None
    """A histogram's bucket bounds, when Temporal's defaults (0.05 .. 10) do not fit its values."""


TURNS = Metric("wolf_turns", "Turns finished, by outcome")
SESSION_STATES = Metric("wolf_session_states", "Sessions entering a state, by state")
STEPS = Metric("wolf_steps", "Model requests answered, by model and tenant")
TOKENS = Metric("wolf_tokens", "Tokens used, by model, tenant and kind (input, output)")
TOOL_SECONDS = Metric("wolf_tool_call_seconds", "Tool call latency, by server, tool and outcome", "s")
TRANSCRIPT_CACHE = Metric(
    "wolf_transcript_cache", "Model requests whose transcript the worker held (hit) or fetched"
)
MCP_PROCESSES = Metric("wolf_mcp_processes", "MCP server processes this worker runs")
MCP_CONNECTS = Metric("wolf_mcp_connects", "MCP connections opened, by server and reason")
HOSTS = Metric("wolf_hosts", "Hosts (config, tenant) live on this worker")
COST_USD = Metric(
    "wolf_cost_usd",
    "USD of priced model requests, by model and tenant (the histogram's _sum)",
    buckets=tuple(10 ** (e / 2) for e in range(-12, 3)),  # $0.000001 .. $10, half a decade apart
)
UNPRICED = Metric("wolf_unpriced_requests", "Model requests no price is known for, by model and tenant")
BUCKETED = (COST_USD,)

_runtime: list[Runtime] = []


def serve(port: int, host: str = "0.0.0.0") -> Runtime:
    """Make the process's default Temporal runtime serve Prometheus metrics on `host:port`; call it
    before the first client connects (clients and workers use the default runtime)."""
    runtime = Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(
                bind_address=f"{host}:{port}",
                counters_total_suffix=True,
                durations_as_seconds=True,
                histogram_bucket_overrides={m.name: m.buckets for m in BUCKETED if m.buckets},
            ),
            attach_service_name=False,  # not `service_name="temporal-core-sdk"` on every series
        )
    )
    Runtime.set_default(runtime, error_if_already_set=True)
    _runtime.append(runtime)
    return runtime


def meter() -> MetricMeter:
    if workflow.in_workflow():
        return workflow.metric_meter()
    if activity.in_activity():
        return activity.metric_meter()
    return _runtime_meter()


def _runtime_meter() -> MetricMeter:
    return _runtime[-1].metric_meter if _runtime else MetricMeter.noop


def count(metric: Metric, value: int = 1, **attributes: str) -> None:
    """Add `value` to a counter, with these attributes."""
    meter().create_counter(metric.name, metric.description, metric.unit).add(value, attributes)


def observe(metric: Metric, value: float, **attributes: str) -> None:
    """Record one value in a histogram."""
    meter().create_histogram_float(metric.name, metric.description, metric.unit).record(value, attributes)


def gauge(metric: Metric, value: float, **attributes: str) -> None:
    """Set a gauge; gauges are worker-wide, so always on the runtime's meter (an activity's would
    split them by activity type)."""
    _runtime_meter().create_gauge_float(metric.name, metric.description, metric.unit).set(value, attributes)
