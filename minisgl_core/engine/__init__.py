"""The compute side of minisgl: models, weights, paged KV cache, batching, sampling, offline LLM.

Importing this package is light; the submodules import torch.
"""
