"""A plain JAX program for two processes on one machine (jax.distributed over localhost, gloo between them), each
with two CPU devices: a psum across the processes' shards, and work of the process's own.

    python two_processes.py PROCESS_ID PORT
"""
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

process_id, port = int(sys.argv[1]), int(sys.argv[2])
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=2, process_id=process_id)
mesh = jax.make_mesh((jax.device_count(),), ("i",))
local = np.linspace(-2, 2, 4 * jax.local_device_count(), dtype=np.float32).reshape(jax.local_device_count(), 4)
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("i")), local + 10 * process_id)
total = jax.jit(jax.shard_map(lambda v: jax.lax.psum(jnp.sin(v) * v, "i"), mesh=mesh, in_specs=P("i"),
                              out_specs=P()))(x)
print("devices", jax.device_count(), jax.local_device_count(), "shards", len(total.addressable_shards))
print("psum", np.asarray(total.addressable_data(0)).tolist())
own = jnp.tanh(jnp.asarray(local)) @ jnp.ones(4) + process_id
print("own", np.asarray(own).tolist())
