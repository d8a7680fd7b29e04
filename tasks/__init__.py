"""Prefect tasks and I/O helpers."""
