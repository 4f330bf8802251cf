"""Numpy reference kernels: spatial."""

from __future__ import annotations
