"""Benchmark bodies that tests run in short form; bench/ runs the long forms through thin entry points."""
