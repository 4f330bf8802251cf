"""Numpy reference kernels: control."""

from __future__ import annotations
