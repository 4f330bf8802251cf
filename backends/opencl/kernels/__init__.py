"""OpenCL C generators, one per kernel op (base.py has the contract). Importing this
package registers them all in `GENERATORS`."""

from palimpsest.backends.opencl.kernels.base import GENERATORS  # noqa: F401
from palimpsest.backends.opencl.kernels import elementwise  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import generic  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import normalize  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import movement  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import resize  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import linalg  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import conv  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import spatial  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import slicing  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import recurrent  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import quant  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import quant_conv  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import lstm  # noqa: F401  (registration)
from palimpsest.backends.opencl.kernels import gru  # noqa: F401  (registration)
