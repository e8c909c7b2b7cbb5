"""Adapters to agent frameworks (each behind its own extra): `engramdb.adapters.langgraph`."""
