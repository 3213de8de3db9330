"""Helpers shared by the unit, integration and chaos tests: ports, network faults, server conf, scratch schemas."""
