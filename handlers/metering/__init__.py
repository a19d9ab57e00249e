"""Metering: per-key rate limits, and the reservation and settlement of what a request may cost."""
