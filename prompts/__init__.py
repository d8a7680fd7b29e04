"""Jinja2 templates for the judges' prompts and the HTML report."""
