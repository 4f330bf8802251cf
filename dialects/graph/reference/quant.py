"""Numpy reference kernels: quant."""

from __future__ import annotations
