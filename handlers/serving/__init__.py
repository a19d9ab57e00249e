"""Serving an inference request: the relay (routing, metering, the upstream attempts, the answer in the caller's
format, the decision record) and token counting. It sits above inference, metering and observability, which it
puts together."""
