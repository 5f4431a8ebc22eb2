"""Hugging Face transformers' ExecuTorch exporter, with xnnfold's folding partitioner.

`export(model, sample_inputs, config=None)` is ``ExecutorchExporter().export(model,
sample_inputs, config)`` with `xnnfold.XnnpackFoldingPartitioner` in place of the stock
``XnnpackPartitioner``; everything else the exporter does is kept (docs/integrations.md).
Needs transformers (``pip install "xnnfold[transformers]"``): importing this module
without it raises an ImportError naming that install.
"""

from xnnfold.integrations._transformers import export, require_transformers

require_transformers()

__all__ = ["export"]
