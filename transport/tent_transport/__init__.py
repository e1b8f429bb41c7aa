"""The I/O layer of TENT: rails, the dispatch core and the deadline simulator.

Subpackages and modules (each with a curated ``__all__``):

* :mod:`tent_transport.devices`: the :class:`~tent_transport.devices.Device` protocol (one
  rail) and its slice, lease and completion values.
* :mod:`tent_transport.dispatch`: the sans-IO dispatch core every driver runs (queue → gate →
  rail selection → arbitration → post → completions → meters).
* :mod:`tent_transport.sim`: the same core over simulated NICs in virtual time
  (``tent sim deadline``).
* :mod:`tent_transport.config`: the engine configuration; :mod:`tent_transport.errors`: the
  typed errors.
"""
