"""Engines: the interface every engine implements, NumPy (CPU) and CuPy (GPU) engines, dense, sparse and
streamed join-sum steps, the CUDA kernels, and which engine runs a plan."""
