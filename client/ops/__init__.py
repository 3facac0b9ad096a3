"""Operator tools: the command line, the status table and the live dashboard."""
