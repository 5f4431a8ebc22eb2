"""Reporting: why a GEMM was not delegated (`_reasons`), `explain` and `summarize`."""
