"""The rule families: one module per family of JAX primitives, each rule registered in the backend's table
(../table.py) right under it. A family reaches another's public names only; what several share is in ../numerics."""
