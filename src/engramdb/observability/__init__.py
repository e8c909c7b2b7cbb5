"""Access-stream statistics and (later) the OpenTelemetry bridge."""
