"""Benchmarks: transports, the serving path end to end, and transport comparisons."""
