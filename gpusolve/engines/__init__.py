"""Engines: the interface every engine implements, NumPy (CPU) and CuPy (GPU) engines, dense, sparse and
streamed join-sum steps, the CUDA kernels' sources, the engine registry and the one device policy."""
