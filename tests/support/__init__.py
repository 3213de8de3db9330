"""Helpers shared by the unit, integration and chaos tests: ports and network faults."""
