"""Numpy reference kernels: signal."""

from __future__ import annotations
