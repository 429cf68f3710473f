"""The contract suite a host subclasses in its own tests: ``class TestMyBoard(BoardContract)``."""

from taskboard.boardtest._suite import BoardContract

__all__ = ["BoardContract"]
