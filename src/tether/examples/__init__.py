"""Example agents shipped with tether."""
