"""Numpy reference kernels: attention."""

from __future__ import annotations
