"""Sans-IO stitchers: the rounds of a phantom loop as one client stream, one module per API.

See ``base`` for the contract every API's stitcher follows.
"""

from .base import Failure, RoundEnd, Stitcher

__all__ = ["Failure", "RoundEnd", "Stitcher"]
