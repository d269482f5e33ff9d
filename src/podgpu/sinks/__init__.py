"""Consumers of snapshots: Prometheus exposition, CloudWatch EMF, live page. Pure functions."""
