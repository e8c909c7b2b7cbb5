"""Access-stream statistics (`stats`) and the OpenTelemetry bridge (`otel`)."""
