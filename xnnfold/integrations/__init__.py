"""Integrations with other export front ends, each in its own module, imported on demand.

- `xnnfold.integrations.transformers`: Hugging Face transformers' ExecuTorch exporter with
  the folding partitioner (``pip install "xnnfold[transformers]"``).

Importing this package imports nothing else: each integration checks for its front end
when it is imported.
"""

__all__: list[str] = []
