"""In-repo fakes of external systems (STYLE rule 6)."""
