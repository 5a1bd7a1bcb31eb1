"""``python -m tether``: the ``tether`` command."""

from __future__ import annotations

from tether.cli.app import main

__all__: list[str] = []

if __name__ == "__main__":
    main()
