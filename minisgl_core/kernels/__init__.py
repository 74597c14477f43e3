"""The matmul and attention kernels the engine runs, and what this host lets them use."""
