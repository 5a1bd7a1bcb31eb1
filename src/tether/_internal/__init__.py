"""Internals: not part of tether's public API; may change without notice."""
