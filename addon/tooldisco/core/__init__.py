"""Neutral types and small helpers every layer uses. Imports nothing else of the project."""
