"""The CUDA runtime shared by every GPU user: CuPy's import, the device and its memory budget, the driver's start
(runtime.py), pinned host memory (pinned.py), and the one kernel loader with the prebuilt cubins (loader.py, cubins.py)."""
