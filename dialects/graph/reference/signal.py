"""Reference kernels of ops_signal.py (complex values: a last dim of 2)."""

from __future__ import annotations

import numpy as np

from ._common import ONNX_DTYPES, i_attr, kernel, kernels, norm_axis, op_error, opt, req


def _int(x) -> int:
    return int(np.asarray(x).reshape(-1)[0])


def _window(onnx_op, shape):
    def fn(inputs, attrs):
        size = _int(req(onnx_op, inputs, 0, "size"))
        periodic = i_attr(attrs, "periodic", 1)
        n = np.arange(size, dtype=np.float64)
        span = size if periodic else size - 1
        out = shape(n / span if span else n)
        return [out.astype(ONNX_DTYPES[i_attr(attrs, "output_datatype", 1)])]

    return fn


kernels(_window, {
    "HannWindow": lambda t: np.sin(np.pi * t) ** 2,
    "HammingWindow": lambda t: 25 / 46 - (1 - 25 / 46) * np.cos(2 * np.pi * t),
    "BlackmanWindow": lambda t: 0.42 - 0.5 * np.cos(2 * np.pi * t) + 0.08 * np.cos(4 * np.pi * t),
})


@kernel("MelWeightMatrix")
def mel_weight_matrix(inputs, attrs):
    """Triangular filters between mel-spaced FFT bins (HTK mel scale), ONNX's integer
    bin placement."""
    bins = _int(req("MelWeightMatrix", inputs, 0, "num_mel_bins"))
    length = _int(req("MelWeightMatrix", inputs, 1, "dft_length"))
    rate = _int(req("MelWeightMatrix", inputs, 2, "sample_rate"))
    low = float(np.asarray(req("MelWeightMatrix", inputs, 3, "lower_edge_hertz")).reshape(-1)[0])
    high = float(np.asarray(req("MelWeightMatrix", inputs, 4, "upper_edge_hertz")).reshape(-1)[0])
    low_mel = 2595 * np.log10(1 + low / 700)
    high_mel = 2595 * np.log10(1 + high / 700)
    points = np.arange(bins + 2) * (high_mel - low_mel) / (bins + 2) + low_mel
    hertz = 700 * (10 ** (points / 2595) - 1)
    edges = (((length + 1) * hertz) // rate).astype(int)
    out = np.zeros((length // 2 + 1, bins))
    for i in range(bins):
        left, center, right = edges[i], edges[i + 1], edges[i + 2]
        if center == left:
            out[center, i] = 1
        else:
            j = np.arange(left, center + 1)
            out[j, i] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, i] = (right - j) / (right - center)
    return [out.astype(ONNX_DTYPES[i_attr(attrs, "output_datatype", 1)])]


def _as_complex(x):
    return x[..., 0] if x.shape[-1] == 1 else x[..., 0] + 1j * x[..., 1]


def _as_pairs(z, dtype):
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


@kernel("DFT")
def dft(inputs, attrs):
    x = req("DFT", inputs, 0, "input")
    if x.shape[-1] not in (1, 2):
        raise op_error("DFT", f"the last dim must be 1 or 2, got {x.shape[-1]}")
    axis_operand = opt(inputs, 2)
    axis = _int(axis_operand) if axis_operand is not None else i_attr(attrs, "axis", -2)
    axis = norm_axis("DFT", axis, x.ndim)
    inverse, onesided = i_attr(attrs, "inverse", 0), i_attr(attrs, "onesided", 0)
    length = opt(inputs, 1)
    length = _int(length) if length is not None and np.size(length) else None
    if length is None:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    z = _as_complex(x)
    if inverse:
        if onesided:
            return [np.fft.irfft(z, n=length, axis=axis)[..., None].astype(x.dtype)]
        return [_as_pairs(np.fft.ifft(z, n=length, axis=axis), x.dtype)]
    out = np.fft.fft(z, n=length, axis=axis)
    if onesided:
        out = np.take(out, np.arange(length // 2 + 1), axis=axis)
    return [_as_pairs(out, x.dtype)]


@kernel("STFT")
def stft(inputs, attrs):
    x = req("STFT", inputs, 0, "signal")
    step = _int(req("STFT", inputs, 1, "frame_step"))
    window = opt(inputs, 2)
    length = opt(inputs, 3)
    length = _int(length) if length is not None else (
        window.shape[0] if window is not None else x.shape[-2])
    if window is None:
        window = np.ones(length, x.dtype)
    frames = 1 + (x.shape[1] - length) // step
    z = _as_complex(x)
    starts = np.arange(frames) * step
    framed = z[:, starts[:, None] + np.arange(length)[None, :]] * window
    spectrum = np.fft.fft(framed, n=length, axis=-1)
    if i_attr(attrs, "onesided", 1):
        spectrum = spectrum[..., :length // 2 + 1]
    return [_as_pairs(spectrum, x.dtype)]
