"""Prefect flows, their parameter models and the CLI."""
