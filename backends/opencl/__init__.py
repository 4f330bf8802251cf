"""The OpenCL backend: planned kernel-level IR run as generated OpenCL C (see
executor.py). pyopencl is imported only when the backend is used (runtime.py), so a
machine without it installs and runs everything else."""
