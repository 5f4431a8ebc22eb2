"""Folding: inside XNNPACK preprocess, evaluate each marked weight computation to a constant.

`_pass` is the fold pass, `_placeholders` the constant placeholders it reads, adds and
deletes, `_tanh_gelu` writes each marked tanh GELU as the tanh formula (the installed
serializer would write exact GELU), `_hook` runs both first in XNNPACK's preprocess for
the programs xnnfold marked, `_unused` drops the constants a fold left unread.
"""
