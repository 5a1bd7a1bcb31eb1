"""The ``tether`` command line (Typer + Rich)."""
