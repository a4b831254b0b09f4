"""Exporters only format a Report (and the signal history); they never judge."""
