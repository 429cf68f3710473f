"""Races under controlled scheduling: what a board may call to mark a scheduling point.

This module only re-exports; the code lives in a private module. See docs/races.md.
"""

from taskboard._public import show_public_paths
from taskboard._schedule import yield_point

__all__ = ["yield_point"]

show_public_paths(globals())
