"""Observability: Prometheus metrics, the one JSON log line per request, and decision records (explain)."""
