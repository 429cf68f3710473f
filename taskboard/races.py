"""Races under controlled scheduling: what a board may call to mark a scheduling point.

This module only re-exports; the code lives in a private module. See docs/races.md.
"""

from taskboard._public import show_public_paths
from taskboard._schedule import async_yield_point, yield_point

__all__ = ["async_yield_point", "yield_point"]

show_public_paths(globals())
