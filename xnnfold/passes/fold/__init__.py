"""Folding: inside XNNPACK preprocess, evaluate each marked weight computation to a constant.

`_pass` is the fold pass, `_hook` runs it first in XNNPACK's preprocess for the programs
xnnfold marked, `_unused` drops the constants a fold left unread.
"""
