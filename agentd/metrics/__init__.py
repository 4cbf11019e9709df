"""The daemon's own numbers for Prometheus (docs/metrics.md).

`port.Metrics` is what the rest of the daemon reports to; `NULL_METRICS` is the default when no
`[metrics]` output is configured, so the hot paths pay one no-op call. `registry.PrometheusMetrics`
(needs the `metrics` extra, `prometheus-client`) keeps the figures, `labels` keeps every label
value inside a bounded set, and `exposition` serves them on the opt-in listener and the textfile.
"""
