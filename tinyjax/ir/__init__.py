"""The intermediate representation every layer above shares: the flushed Program (program.py), JAX's typed PRNG keys
as data (keys.py), and the interface a backend implements (backend.py: Backend, Compiled, Device and the errors)."""
