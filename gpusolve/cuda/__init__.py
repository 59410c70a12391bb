"""The CUDA runtime shared by every GPU kernel: CuPy's import, the device, the driver's start."""
