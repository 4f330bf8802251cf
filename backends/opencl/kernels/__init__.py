"""OpenCL C generators, one per kernel op (base.py has the contract). Importing this
package registers them all in `GENERATORS`."""

from palimpsest.backends.opencl.kernels.base import GENERATORS  # noqa: F401
from palimpsest.backends.opencl.kernels import elementwise  # noqa: F401  (registration)
