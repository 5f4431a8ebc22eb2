"""The model-zoo sweeps: an engine shared by the libraries (`engine`) and one subpackage
per library swept (`timm`, `transformers`); README.md."""
