"""CloudWatch assets for a declarations config: a dashboard body and alarm definitions.

Both are derived from the config (namespace, which metrics each declaration selects and with
which dimension sets), so they name only metrics the EMF sink can produce for it, and they query
with metric-math SEARCH (dashboard) and Metrics Insights (alarms) so new pods appear without edits.
"""
