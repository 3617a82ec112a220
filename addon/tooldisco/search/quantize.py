"""An int8 copy of the embedding model for queries, made once per process at load.

Why: a query's forward pass is on the search's clock, and the shipped model only stores
its weights as int8: onnxruntime turns them back into float32 at load and multiplies in
float32. onnxruntime's dynamic quantisation (int8 weights per output channel, activations
quantised on the fly) multiplies in int8 instead, for much less CPU per token.
Tool vectors stay the shipped model's (they are computed once and cached, and quantised
catalog vectors cost more multi-turn recall): a query's vector is the quantised model's
approximation of the shipped model's, which costs little recall
(``scripts/bench_retrieval.py`` measures hybrid search with it).

The conversion needs the ``onnx`` package (part of the ``semantic`` extra); it takes a
few seconds of CPU, in a private temporary directory, and its result stays in memory.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path


class _QuantiserChatter(logging.Filter):
    """Drops the quantiser's own records: it logs a line per tensor to the root logger,
    which in mitmproxy is the proxy's event log."""

    def __init__(self, package: Path):
        super().__init__()
        self._package = str(package)

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.pathname.startswith(self._package)


def dynamic_int8(model: Path) -> bytes:
    """The model at ``model`` with its matrix products in int8 (ONNX bytes); raises
    ImportError without ``onnx``."""
    from onnxruntime import quantization
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    chatter = _QuantiserChatter(Path(quantization.__file__).parent)
    logging.getLogger().addFilter(chatter)  # a logger's filters see only its own records
    try:
        with tempfile.TemporaryDirectory(prefix="tooldisco-model-") as tmp:  # 0700
            folded, quantised = Path(tmp) / "float32.onnx", Path(tmp) / "int8.onnx"
            # onnxruntime's own graph optimisation folds the stored int8 weights into float32
            # constants, the form the quantiser reads (the symbolic pass would need sympy).
            quant_pre_process(model, folded, skip_symbolic_shape=True)
            quantize_dynamic(folded, quantised, weight_type=QuantType.QInt8, per_channel=True)
            return quantised.read_bytes()
    finally:
        logging.getLogger().removeFilter(chatter)
