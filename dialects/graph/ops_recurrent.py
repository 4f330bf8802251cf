"""Graph ops: recurrent (see naming.py for the ONNX ops this module declares)."""

from __future__ import annotations
