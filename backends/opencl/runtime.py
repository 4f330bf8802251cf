"""The OpenCL runtime: the device, its programs and a way to run launches on arrays.

pyopencl is imported here, when the backend is first used. `device(index)` opens one
device of the first platform that has any (the index counts devices over all
platforms, in `list_devices()` order) with one in-order queue; `Device.kernel(source,
name)` builds a program once per source text and keeps its kernels (PoCL also keeps
built programs in its on-disk cache, so a warm process builds faster than a cold one).
A profiled run enqueues on a second queue of the device, `profiling_queue`, made when
first asked for, whose commands record device timestamps (the profiler reads them from
the events the launches return); the plain queue stays as it was, without.
`run_launches` runs a generator's launches on host arrays: what the generators' tests
use, independent of the executor.
"""

from __future__ import annotations

import functools
import os
import time
from dataclasses import dataclass

import numpy as np

from palimpsest.backends.host import HUGE_PAGES_FROM, aligned_empty, huge_page_copy, l2_bytes
from palimpsest.backends.opencl.kernels.base import DERIVED, VNNI, DeviceLimits, Launch, Ref


def _spare_cpu() -> bool:
    """Whether this process may run on more than one CPU (`Device.wait` polls there)."""
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):   # (no affinity API: the CPU count)
        return (os.cpu_count() or 1) > 1


# what the VNNI code needs of the CPU (the probe runs it: on a CPU without the 512-bit
# instruction, avx_vnni's alone, it would fault, not fail)
_AVX512_VNNI = frozenset({"avx512f", "avx512bw", "avx512_vnni"})


class _Probed:
    """A truth value found at its first use by `probe()` (DeviceLimits.vnni: the VNNI
    probe builds a program, ~35 ms even from PoCL's cache, which a device whose models
    have no 8-bit op never pays)."""

    __slots__ = ("probe", "value")

    def __init__(self, probe):
        self.probe, self.value = probe, None

    def __bool__(self) -> bool:
        if self.value is None:
            self.value, self.probe = bool(self.probe()), None
        return self.value


def _vnni_works(context, queue) -> bool:
    """Whether a kernel using `VNNI` builds and sums right on this device."""
    import pyopencl as cl

    source = VNNI + """PAL_VNNI void dpbusd(__local const int* b, int16* out) {
  // 1 + the u8 x s8 products of the bytes 1, 2, 255, 128 by b's, lane by lane
  const pal_v16si sums = __builtin_ia32_vpdpbusd512(PAL_SPLAT(1), PAL_SPLAT((int)0x80FF0201u),
                                                    *(__local const pal_v16si_u*)b);
  *out = *(const int16*)&sums;
}
__kernel void probe(__global const int* b, __global int* out) {
  __local int row[16];
  for (int n = 0; n < 16; ++n) row[n] = b[n];
  int16 sums;
  dpbusd(row, &sums);
  vstore16(sums, 0, out);
}"""
    b = np.arange(-32, 32, dtype=np.int8)
    want = 1 + (b.reshape(16, 4).astype(np.int32) * np.array([1, 2, 255, 128])).sum(axis=1)
    try:
        kernel = cl.Program(context, source).build().probe
        flags = cl.mem_flags
        b_mem = cl.Buffer(context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=b)
        out_mem = cl.Buffer(context, flags.WRITE_ONLY, 64)
        kernel(queue, (1,), (1,), b_mem, out_mem)
        got = np.empty(16, np.int32)
        cl.enqueue_copy(queue, got, out_mem)
        queue.finish()
    except cl.Error:
        return False
    return bool(np.array_equal(got, want))


class OpenCLUnavailable(Exception):
    """No pyopencl, no platform or no such device; the message says which and what to do."""


def _cl():
    try:
        import pyopencl
    except ImportError:
        raise OpenCLUnavailable(
            "the OpenCL backend needs pyopencl: pip install pyopencl (and an OpenCL "
            "platform, e.g. Debian's pocl-opencl-icd)") from None
    return pyopencl


def list_devices() -> list:
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error:
        platforms = []
    devices = []
    for platform in platforms:
        try:
            devices.extend(platform.get_devices())
        except cl.Error:
            continue
    return devices


def availability() -> str | None:
    """None when an OpenCL device can be used, else why not (one line)."""
    try:
        if not list_devices():
            return ("no OpenCL platform with a device (install one, e.g. Debian's "
                    "pocl-opencl-icd)")
    except OpenCLUnavailable as error:
        return str(error)
    return None


def _exact_tanh(lanes) -> str:
    """`pal_tanh` on float (`lanes` "") or float`lanes` vectors, from double (see
    Device.HELPERS)."""
    double = f"double{lanes}"

    def pick(condition, then, otherwise):  # select on vectors (their compares give longs)
        return f"select({otherwise}, {then}, {condition})" if lanes else \
            f"({condition} ? {then} : {otherwise})"

    limit = pick("fabs(d) > 20.0", f"copysign(({double})20.0, d)", "d")
    taylor = "d * (1.0 + s * (-1.0 / 3 + s * (2.0 / 15 + s * (-17.0 / 315))))"
    return (f"__attribute__((overloadable)) inline float{lanes} pal_tanh(float{lanes} x) {{\n"
            f"  const {double} d = convert_{double}(x), s = d * d;\n"
            f"  const {double} e = exp(2.0 * {limit});\n"
            f"  return convert_float{lanes}("
            f"{pick('fabs(d) < 1e-3', taylor, '(e - 1.0) / (e + 1.0)')});\n}}\n")


# erf(x) = x * P(x^2) / Q(x^2) on x clamped to [-4, 4]: Eigen's float erf, the numpy
# backend's (backends/numpy/kernel_ops_steps.py, max abs error 4.5e-7), NaN kept
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


def _rational_erf(lanes) -> str:
    """`pal_erf` on float (`lanes` "") or float`lanes` vectors (see Device.HELPERS)."""
    v = f"float{lanes}"
    c = lambda value: f"({v})({float(np.float32(value))!r}f)"  # noqa: E731
    lines = [f"__attribute__((overloadable)) inline {v} pal_erf({v} x) {{",
             f"  const {v} c = x < {c(-4.0)} ? {c(-4.0)} : (x > {c(4.0)} ? {c(4.0)} : x);",
             f"  const {v} x2 = c * c;",
             f"  {v} p = x2 * {c(_ERF_P[0])} + {c(_ERF_P[1])};"]
    lines += [f"  p = p * x2 + {c(k)};" for k in _ERF_P[2:]]
    lines.append(f"  {v} q = x2 * {c(_ERF_Q[0])} + {c(_ERF_Q[1])};")
    lines += [f"  q = q * x2 + {c(k)};" for k in _ERF_Q[2:]]
    lines += ["  return p * c / q;", "}"]
    return "\n".join(lines) + "\n"


@dataclass
class BuildStats:
    builds: int = 0          # programs compiled in this process
    build_seconds: float = 0.0
    hits: int = 0            # kernels found already built


class Device:
    """One OpenCL device, its context and queue, and the programs built for it."""

    def __init__(self, cl_device):
        cl = _cl()
        self.cl = cl
        self.device = cl_device
        self.context = cl.Context([cl_device])
        self.queue = cl.CommandQueue(self.context)
        self._profiling_queue = None
        # MEM_BASE_ADDR_ALIGN is in bits; planned offsets are multiples of this many bytes
        self.alignment = max(64, cl_device.mem_base_addr_align // 8)
        host_cpu = bool(cl_device.type & cl.device_type.CPU)
        from palimpsest.backends.onednn import cpu_flags

        self.limits = DeviceLimits(cl_device.max_work_group_size, cl_device.local_mem_size,
                                   cl_device.max_compute_units,
                                   tuple(cl_device.max_work_item_sizes), host_cpu,
                                   l2_bytes() if host_cpu else 0,
                                   host_cpu and _AVX512_VNNI <= cpu_flags()
                                   and _Probed(lambda: _vnni_works(self.context,
                                                                   self.queue)))
        self.name = f"{cl_device.name.strip()} ({cl_device.platform.name.strip()})"
        self.build_stats = BuildStats()
        self._kernels: dict = {}   # (source, name) -> cl.Kernel
        self._dtypes: dict = {}    # kernel -> the argument dtypes it was given (`launch`)
        self.spins = _spare_cpu()

    # How long `wait` polls before it blocks. Where the driver's worker threads run on
    # other CPUs than the caller (PoCL's pthread device), a blocking wait is woken by
    # another CPU, which on a VM costs what waking a sleeping virtual CPU costs: a kernel
    # launch and its finish took 38-90 us on the 2-CPU VM, a 16 KiB blocking read 75-80
    # us, where polling the command's status took 20-26 and 20-25 (and a run waits at
    # least once: to read its results). A longer wait blocks after this (the host
    # thread then costs a CPU no longer than this); polling yields its CPU each time
    # (a worker sharing it runs), and a process allowed one CPU never polls: there the
    # blocking wait was the fast one (8 us, polling 18-59).
    SPIN_SECONDS = 0.0005

    def wait(self, queue) -> None:
        """Return when every command enqueued on `queue` is done: its status polled
        for up to SPIN_SECONDS where a CPU is spare (`spins`), else (and then) a
        blocking finish."""
        if self.spins:
            cl = self.cl
            marker = cl.enqueue_marker(queue)
            queue.flush()
            done, clock, yield_cpu = cl.command_execution_status.COMPLETE, time.perf_counter, \
                os.sched_yield
            deadline = clock() + self.SPIN_SECONDS
            while True:
                status = marker.command_execution_status
                if status == done or status < 0 or clock() > deadline:   # (< 0: an error)
                    break
                yield_cpu()
        queue.finish()

    # Functions the generated kernels may call, put before a program's source when it
    # names them. pal_tanh: float tanh rounded from a double one where the device has
    # fp64 (PoCL's float tanh is an ulp or more off often enough to flip a
    # DynamicQuantizeLinear tie downstream: an int8 BiLSTM tagger's output moved by 1e-1).
    # The double one is (e^2x - 1) / (e^2x + 1), x clamped to +-20 (tanh is 1 in float
    # from 9.1; NaN stays NaN), and below 1e-3 its Taylor series to x^7 (where the
    # quotient cancels): 1.3x faster than the double tanh on PoCL, the same floats (none
    # differed in 32M inputs from 1e-6 to 1e2, with +-0, +-inf, NaN). Overloaded on float
    # vectors too (a chain kernel's lanes, elementwise.py): the double tanh of a vector
    # runs vectorized, 6x the scalar call per element on PoCL.
    # pal_erf: float erf as Eigen's rational function (`_rational_erf`: 11 multiply-adds
    # and a division, vectorized; max abs error 4.4e-7; the numpy backend, bound by its
    # passes over memory, takes a tanh form of fewer passes instead): PoCL's erf on a
    # float16 vector ran lane by lane, 4.3 ns an element (ppocr_v6_tiny_det's GELUs: 6 ms
    # a run).
    HELPERS = {"pal_tanh": (
        "#ifdef cl_khr_fp64\n#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" +
        "".join(_exact_tanh(n) for n in ("", 2, 4, 8, 16)) + "#else\n" +
        "".join(f"__attribute__((overloadable)) inline float{n} pal_tanh(float{n} x) "
                f"{{ return tanh(x); }}\n" for n in ("", 2, 4, 8, 16)) + "#endif\n"),
        "pal_erf": "".join(_rational_erf(n) for n in ("", 2, 4, 8, 16))}

    def kernel(self, source: str, name: str, flush_denormals: bool = False):
        found = self._kernels.get((source, name))
        if found is not None:
            self.build_stats.hits += 1
            return found
        start = time.perf_counter()
        text = source
        if "double" in source:
            text = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + source
        text = "".join(helper for helper_name, helper in self.HELPERS.items()
                       if helper_name in source) + text
        try:
            program = self.cl.Program(self.context, text).build(
                options=["-cl-mad-enable"] + (["-cl-denorms-are-zero"] if flush_denormals
                                              else []))
        except self.cl.Error as error:  # a generator's bug, never the user's input
            raise RuntimeError(f"OpenCL build of kernel '{name}' failed: {error}\n"
                               f"--- source ---\n{text}") from None
        for kernel in program.all_kernels():
            self._kernels[(source, kernel.function_name)] = kernel
        self.build_stats.builds += 1
        self.build_stats.build_seconds += time.perf_counter() - start
        return self._kernels[(source, name)]

    @property
    def profiling_queue(self):
        """An in-order queue with PROFILING_ENABLE: its events have device timestamps."""
        if self._profiling_queue is None:
            self._profiling_queue = self.cl.CommandQueue(
                self.context, properties=self.cl.command_queue_properties.PROFILING_ENABLE)
        return self._profiling_queue

    def buffer(self, nbytes: int, poison: bool = False, queue=None):
        """A new buffer; with `poison`, filled with 0x5A on `queue` (default the plain
        one): the queue that will use it, which alone keeps the fill before its kernels."""
        mem = self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE, max(nbytes, 1))
        return self._poisoned(mem, nbytes, poison, queue)

    def _poisoned(self, mem, nbytes: int, poison: bool, queue):
        """`mem`, its first `nbytes` filled with 0x5A on `queue` where `poison`."""
        if poison and nbytes:
            self.cl.enqueue_fill_buffer(self.queue if queue is None else queue, mem,
                                        np.uint8(0x5A), 0, nbytes)
        return mem

    def host_buffer(self, nbytes: int, poison: bool = False, queue=None) -> tuple:
        """(a new buffer, the host array that is its memory, or None): on a device that
        uses a USE_HOST_PTR buffer's host memory in place (`shares_host_memory`), the
        buffer made over an array of ours, which host ops then read and write directly
        once the queue is done (no map and unmap commands: on PoCL's pthread device,
        while its worker runs kernels, they cost a host op ~70 us); else `buffer`'s."""
        if not self.shares_host_memory:
            return self.buffer(nbytes, poison, queue), None
        host = aligned_empty(max(nbytes, 1), self.alignment)
        mem = self.cl.Buffer(self.context, self.cl.mem_flags.READ_WRITE |
                             self.cl.mem_flags.USE_HOST_PTR, hostbuf=host)
        return self._poisoned(mem, nbytes, poison, queue), host

    @functools.cached_property
    def shares_host_memory(self) -> bool:
        """Whether this device keeps a USE_HOST_PTR buffer in the host's array itself:
        a CPU device where a fill is seen in the array and a write to the array is read
        back (PoCL's CPU devices, checked once on a 4 KiB buffer)."""
        if not self.limits.host_cpu:
            return False
        cl = self.cl
        try:
            host = aligned_empty(4096, self.alignment)
            host.fill(1)
            mem = cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR,
                            hostbuf=host)
            cl.enqueue_fill_buffer(self.queue, mem, np.uint8(7), 0, host.nbytes)
            self.queue.finish()
            filled = bool(np.all(host == 7))
            host.fill(3)
            back = np.zeros_like(host)
            cl.enqueue_copy(self.queue, back, mem, is_blocking=True)
            return filled and bool(np.all(back == 3))
        except cl.Error:
            return False

    def upload(self, array: np.ndarray, in_place: bool = False):
        """A new buffer holding `array`, for data of one run (an input, a derived buffer
        of a run's value). With `in_place`, on a CPU device, the buffer is `array`'s own
        memory (USE_HOST_PTR: nothing copied; the caller keeps `array` unchanged while
        the buffer is used, and no kernel may write it); else a copy, made with the data.
        Huge pages are for what is kept (`upload_kept`): a run's input copied to a fresh
        mapping paid its page faults at every run. layout_cdla's 5.8 MB image took 1.1
        ms a run to bind as a huge-page copy, 0.7 as a plain one, 0.13 in place
        (PoCL copies an array off its 128-byte alignment itself, faster)."""
        mf = self.cl.mem_flags
        array = np.asarray(array, order="C")
        if array.nbytes == 0:
            return self.cl.Buffer(self.context, mf.READ_WRITE, 1)
        if in_place and self.limits.host_cpu:   # (a read-only array too: pyopencl takes it)
            return self.cl.Buffer(self.context, mf.READ_ONLY | mf.USE_HOST_PTR, hostbuf=array)
        return self.cl.Buffer(self.context, mf.READ_WRITE | mf.COPY_HOST_PTR, hostbuf=array)

    def upload_kept(self, array: np.ndarray) -> tuple:
        """(a new buffer holding `array`, the host array with the same bytes that the
        buffer keeps): on a CPU device, from HUGE_PAGES_FROM bytes, a copy on huge pages
        that the device uses in place (a kernel streaming a large weight misses no TLB
        entries: backends/host.py), which host ops then read too (captcha_ocr's 33 MB
        classifier weight: its Gemm on the host took 7.8 ms a run reading the original,
        6.1 reading the copy); else `array` itself."""
        array = np.asarray(array, order="C")
        if self.limits.host_cpu and array.nbytes >= HUGE_PAGES_FROM:
            copy = huge_page_copy(array)
            mf = self.cl.mem_flags
            return self.cl.Buffer(self.context, mf.READ_WRITE | mf.USE_HOST_PTR,
                                  hostbuf=copy), copy
        return self.upload(array), array

    def launch(self, launch: Launch, buffers, queue=None):
        """Enqueue `launch` on `queue` (default the plain one); its event. `buffers(ref)`
        gives a Ref's (cl.Buffer, element offset).
        A kernel's scalar argument dtypes are declared once (the first launch's: a
        kernel's signature fixes them), which makes pyopencl's set_args 40x cheaper
        (0.7 us instead of 29 for nine arguments: what a small model's run spent most
        of its time on)."""
        kernel = self.kernel(launch.source, launch.kernel, launch.flush_denormals)
        args, _ = _arguments(launch, buffers)
        if kernel not in self._dtypes:
            kernel.set_scalar_arg_dtypes(self._arg_dtypes(kernel, launch))
        try:
            kernel.set_args(*args)
            return self.cl.enqueue_nd_range_kernel(self.queue if queue is None else queue,
                                                   kernel, launch.global_size,
                                                   launch.local_size)
        except self.cl.Error as error:  # a generator's bug (or a device limit it missed)
            raise RuntimeError(self._launch_failure(launch, kernel, args, error)) from None

    def _arg_dtypes(self, kernel, launch: Launch) -> list:
        """The kernel's argument dtypes (None for a buffer), from its first launch's
        arguments: a kernel's signature fixes them."""
        dtypes = self._dtypes.get(kernel)
        if dtypes is None:
            dtypes = []
            for arg in launch.args:
                dtypes += [None, np.int64] if isinstance(arg, Ref) else [np.asarray(arg).dtype]
            self._dtypes[kernel] = dtypes
        return dtypes

    def bind(self, launch: Launch, buffers) -> tuple:
        """`launch` with its arguments set once, for a captured program to enqueue again
        and again: (a cl.Kernel of its own, global size, local size, its argument list,
        holes). The kernel is a new one of the cached kernel's program, its scalars
        converted to that kernel's argument dtypes (the conversions `launch` makes);
        `buffers(ref)` gives a Ref's (cl.Buffer, element offset) as in `launch`, or None
        for a buffer the caller binds at each run: the holes, (position in the list,
        Ref) of each, whose two list entries the caller fills before
        `kernel.set_args(*list)` (such a kernel is given the dtypes, which pyopencl
        makes an argument setter for: 0.2 ms a kernel, so only these are). Without holes
        the arguments are set here, one by one. Nothing is enqueued."""
        shared = self._kernels.get((launch.source, launch.kernel)) or self.kernel(
            launch.source, launch.kernel, launch.flush_denormals)
        dtypes = self._arg_dtypes(shared, launch)
        kernel = self.cl.Kernel(shared.program, launch.kernel)
        args, holes = _arguments(launch, buffers)
        if holes:
            kernel.set_scalar_arg_dtypes(dtypes)
        else:
            try:
                for index, (arg, dtype) in enumerate(zip(args, dtypes)):
                    kernel.set_arg(index, arg if dtype is None else np.dtype(dtype).type(arg))
            except self.cl.Error as error:
                raise RuntimeError(self._launch_failure(launch, kernel, args, error)) from None
        return (kernel, tuple(launch.global_size),
                None if launch.local_size is None else tuple(launch.local_size), args, holes)

    def _launch_failure(self, launch: Launch, kernel, args: list, error) -> str:
        """What a failed launch was: the kernel, its sizes against the device's limits and
        each argument (a buffer's bytes, a scalar's dtype and value), for the bug report."""
        shown = []
        for arg in args:
            if isinstance(arg, self.cl.MemoryObject):
                shown.append(f"buffer {arg.size} B")
            else:
                shown.append("NULL" if arg is None else f"{np.asarray(arg).dtype} {arg}")
        return (f"OpenCL launch of kernel '{launch.kernel}' failed on {self.name}: {error}; "
                f"global {launch.global_size}, local {launch.local_size} (device: at most "
                f"{self.limits.max_work_group_size} a group, "
                f"{self.limits.max_work_item_sizes} a dimension); "
                f"{kernel.num_args} parameters, {len(args)} arguments: "
                + ", ".join(shown))


def _arguments(launch: Launch, buffers) -> tuple:
    """`launch`'s argument list, each Ref as its (cl.Buffer, element offset) from
    `buffers(ref)`, and the holes: (position, Ref) of each Ref `buffers` gave None for,
    its two entries (None, 0) for the caller to fill (`Device.bind`)."""
    args, holes = [], []
    for arg in launch.args:
        if isinstance(arg, Ref):
            found = buffers(arg)
            if found is None:
                holes.append((len(args), arg))
                found = (None, 0)
            args.extend(found)
        else:
            args.append(arg)
    return args, holes


class OpTimes:
    """What one op of a profiled run took: the events of the commands it enqueued on the
    profiling queue (`events`) and the seconds it ran on the host (`host_seconds`: a host
    fallback, its transfers included); read once the run is over (`resolve`)."""

    __slots__ = ("cl", "events", "host_seconds")

    def __init__(self, cl):
        self.cl = cl
        self.events: list = []
        self.host_seconds = 0.0

    def resolve(self) -> tuple:
        """(seconds: the host's plus each event's end - start, (first start, last end) of
        the events in device ns or None when there are none)."""
        events = self.events
        if not events:
            return self.host_seconds, None
        try:
            self.cl.wait_for_events(events)
            nanos = 0
            for event in events:
                profile = event.profile
                nanos += profile.end - profile.start
            span = (events[0].profile.start, events[-1].profile.end)
        except self.cl.Error:   # a run that failed (the profiler resolves in its finally):
            return self.host_seconds, None   # its error is the one to see, not this one
        return self.host_seconds + nanos * 1e-9, span


_DEVICES: dict = {}


def device(index: int | None = None) -> Device:
    """The device `index` (default 0), opened once per process."""
    index = 0 if index is None else index
    found = _DEVICES.get(index)
    if found is not None:
        return found
    devices = list_devices()
    if not devices:
        raise OpenCLUnavailable(availability())
    if not 0 <= index < len(devices):
        names = ", ".join(f"{i}: {d.name.strip()}" for i, d in enumerate(devices))
        raise OpenCLUnavailable(f"no OpenCL device {index} (there are {len(devices)}: {names})")
    found = _DEVICES[index] = Device(devices[index])
    return found


def run_launches(launches: list, ins: list, outs: list, workspaces: dict | None = None,
                 dev: Device | None = None) -> list:
    """Run `launches` on host arrays: `ins` are read, `outs` (arrays of the out shapes,
    their contents the initial values) are written and returned; `workspaces` (role ->
    array) are scratch. Each buffer gets its own device buffer at a non-zero offset, so a
    kernel that forgets its offset reads the wrong data."""
    dev = dev or device()
    cl = dev.cl
    pad = 16  # elements before each buffer
    memories = {}

    def put(key, array):
        host = np.concatenate([np.zeros(pad * array.dtype.itemsize, np.uint8),
                               np.asarray(array, order="C").reshape(-1).view(np.uint8)])
        memories[key] = (dev.upload(host), pad, array)

    for index, array in enumerate(ins):
        put(("in", index), array)
    for index, array in enumerate(outs):
        put(("out", index), array)
    for role, array in (workspaces or {}).items():
        put(("ws", role), array)
    for launch in launches:
        for arg in launch.args:
            if isinstance(arg, Ref) and arg.group == "derived" and \
                    ("derived", arg.key) not in memories:
                name, index = arg.key
                put(("derived", arg.key), DERIVED[name](np.asarray(ins[index])))
    for launch in launches:
        dev.launch(launch, lambda r: memories[(r.group, r.key)][:2])
    results = []
    for index, array in enumerate(outs):
        mem = memories[("out", index)][0]
        host = np.empty(pad * array.dtype.itemsize + array.nbytes, np.uint8)
        cl.enqueue_copy(dev.queue, host, mem)
        results.append(host[pad * array.dtype.itemsize:].view(array.dtype).reshape(array.shape))
    dev.queue.finish()
    return results


__all__ = ["BuildStats", "Device", "OpTimes", "OpenCLUnavailable", "availability", "device",
           "list_devices", "run_launches"]
