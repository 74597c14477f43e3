"""Matmul kernels by family (dense, W8A8, weight-only, AMX), their registry and the measured
choice among them."""
