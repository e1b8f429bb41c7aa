"""Benchmark of the TCP transport on loopback; prints one JSON document.

The measurements live in :mod:`tent_transport.bench` (also ``tent bench transport``). Usage:
``python benchmarks/transport.py [--blocks 64] [--small 400] [--no-tls]``.
"""

from __future__ import annotations

import sys

from tent_transport.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
