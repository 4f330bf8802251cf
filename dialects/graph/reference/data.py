"""Numpy reference kernels: data."""

from __future__ import annotations
