"""Coalition structure generation by dynamic programming over subsets: the values (values.py), the DP
and its CPU level step (dp.py), its CUDA kernel (gpu.py), the answer and its bounds (bounds.py), a run
on one engine (solve.py) and over Dask workers (workers.py)."""
