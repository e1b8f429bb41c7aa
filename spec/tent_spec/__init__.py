"""The executable specification of TENT credit epochs, admission states and negotiation."""
