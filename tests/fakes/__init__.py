"""In-repo fakes of external systems."""
