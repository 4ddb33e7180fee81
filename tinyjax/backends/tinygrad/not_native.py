"""The primitives tinygrad does not run natively yet, each with the reason. They run on XLA (TINYJAX_FALLBACK).

The coverage test checks that every primitive of jax.extend.core.primitives is in exactly one of: the rule table,
the call primitives the program builder inlines, or this table.
"""
_EFFECT = "an effect or state primitive (tokens, refs): not an array computation"

NOT_YET_NATIVE: dict[str, str] = {
  # multi-device (the other collectives run inside shard_map and pmap: tinyjax/ir/spmd.py)
  "ragged_all_to_all": "a collective whose chunks' offsets and sizes are values of the program: not stacked over "
                       "the shards yet (tinyjax/ir/spmd.py), so its shard_map runs on XLA",
  # decompositions
  "eig": "LAPACK's geev: complex eigenvalues and eigenvectors, from Francis "
         "double-shift QR iterations on the Hessenberg form, whose count and deflations depend on the data",
  "schur": "LAPACK's gees: Francis double-shift QR iterations on the Hessenberg form, whose count and deflations "
           "depend on the data; the Schur vectors follow those iterations",
  "tridiagonal": "LAPACK's sytrd (eigh's reduction to tridiagonal form, by Householder reflectors and symmetric "
                 "rank-2 updates of one triangle): deterministic like hessenberg, not written yet",
  "tridiagonal_solve": "XLA's CPU runs LAPACK's gtsv, Gaussian elimination with partial pivoting (rows swap where "
                       "|subdiagonal| > |diagonal|, NaN for an exactly zero pivot), not the Thomas algorithm of JAX's "
                       "generic lowering (perturb_singular=True runs jaxlib's own kernel); n sequential steps, "
                       "unrolled here, while tridiagonal systems are typically long (splines, PDEs)",
  "geqp3": "QR with column pivoting where columns marked in jpvt on entry are moved to the front and factored first "
           "(data-dependent); the qr primitive's pivoting, which jnp.linalg and jax.scipy.linalg.qr use, is native",
  # effects and state
  "after_all": _EFFECT, "create_token": _EFFECT, "get": _EFFECT, "swap": _EFFECT, "name": _EFFECT,
  # random numbers other than threefry's bits
  "rng_bit_generator": "XLA's RngBitGenerator (keys of the rbg implementations): bits of XLA's own algorithm",
  "rng_uniform": "XLA's stateful generator: its values are unspecified, there is nothing to reproduce",
  # indexing and sorting
  "select_and_scatter": "generic select and scatter bodies; JAX emits it only inside its lowering of "
                        "select_and_scatter_add (which is native), never in a traced program",
  "approx_top_k": "XLA's CPU ApproxTopK sorts with a plain > (NaN unordered) and, without aggregate_to_topk, sizes "
                  "its output by XLA's own recall formula",
  # autodiff internals
  "custom_lin": "an internal primitive of JAX's linearization; it never reaches a traced program",
}
