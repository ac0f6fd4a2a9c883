"""Observability: OpenTelemetry traces (tracing.py), Prometheus metrics through the Temporal runtime
(metrics.py), logs with session ids (logs.py), and the worker interceptor that feeds them
(interceptor.py). Everything is off and costs nothing until configured: tracing by the standard
`OTEL_*` environment, metrics by `--metrics-port`, JSON logs by `--log-format json`."""
