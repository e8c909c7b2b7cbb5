"""Vector search: the `VectorIndex` protocol and its implementations."""
