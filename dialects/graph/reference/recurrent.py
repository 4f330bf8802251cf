"""Numpy reference kernels: recurrent."""

from __future__ import annotations
