"""Benchmark of the TCP transport on loopback; prints one JSON document.

The measurements live in :mod:`tent_transport.bench` (also ``tent bench transport``). Usage:
``python benchmarks/transport.py [--blocks 64] [--small 400] [--no-tls]``.
"""

from __future__ import annotations

from tent_transport.bench import transport_command

if __name__ == "__main__":
    transport_command(prog_name="transport.py")
