"""Moved to podgpu.attribution.scenario (simulated pods are attribution, not a GPU backend). This
re-export keeps imports written against the old path working; new code imports the new path."""

from podgpu.attribution.scenario import (
    DEFAULT_SCENARIO,
    Scenario,
    ScenarioContainer,
    ScenarioGpu,
    ScenarioXid,
    SimulatedAttributor,
    default_scenario,
    load_scenario,
    parse_scenario,
)

__all__ = ["DEFAULT_SCENARIO", "Scenario", "ScenarioContainer", "ScenarioGpu", "ScenarioXid",
           "SimulatedAttributor", "default_scenario", "load_scenario", "parse_scenario"]
