"""The primitives tinygrad does not run natively yet, each with the reason. They run on XLA (TINYJAX_FALLBACK).

The coverage test checks that every primitive of jax.extend.core.primitives is in exactly one of: the rule table,
the call primitives the program builder inlines, or this table.
"""
_COLLECTIVE = "a collective across devices: tinyjax runs programs on one device"
_COMPLEX = "complex dtypes: tinygrad has none"
_LAPACK = "a LAPACK-style decomposition with no tinygrad formulation yet"
_EFFECT = "an effect or state primitive (tokens, refs): not an array computation"
_SERIES = ("a special function evaluated by series or continued fractions with data-dependent convergence; "
           "not native yet")

NOT_YET_NATIVE: dict[str, str] = {
  # multi-device
  "all_gather": _COLLECTIVE, "all_to_all": _COLLECTIVE, "axis_index": _COLLECTIVE, "pmax": _COLLECTIVE,
  "pmin": _COLLECTIVE, "ppermute": _COLLECTIVE, "psum": _COLLECTIVE, "ragged_all_to_all": _COLLECTIVE,
  # complex numbers and what produces them
  "complex": _COMPLEX, "conj": _COMPLEX, "real": _COMPLEX, "imag": _COMPLEX, "fft": _COMPLEX + " (and no FFT)",
  # decompositions
  "eig": _LAPACK, "eigh": _LAPACK, "svd": _LAPACK, "qr": _LAPACK, "schur": _LAPACK, "hessenberg": _LAPACK,
  "householder_product": _LAPACK, "tridiagonal": _LAPACK, "tridiagonal_solve": _LAPACK,
  # effects and state
  "after_all": _EFFECT, "create_token": _EFFECT, "get": _EFFECT, "swap": _EFFECT, "name": _EFFECT,
  "device_put": "a transfer between devices: tinyjax moves data itself", "sharding_constraint": _COLLECTIVE,
  "empty2": _EFFECT,
  # random numbers other than threefry's bits
  "random_gamma": "a rejection-sampling loop per element (XLA runs it as a batched while loop); not native yet",
  "rng_bit_generator": "XLA's RngBitGenerator (keys of the rbg implementations): bits of XLA's own algorithm",
  "rng_uniform": "XLA's stateful generator: its values are unspecified, there is nothing to reproduce",
  # indexing and sorting
  "select_and_scatter": "generic select and scatter bodies; JAX emits it only inside its lowering of "
                        "select_and_scatter_add (which is native), never in a traced program",
  "approx_top_k": "XLA's CPU ApproxTopK sorts with a plain > (NaN unordered) and, without aggregate_to_topk, sizes "
                  "its output by XLA's own recall formula",
  # special functions
  "bessel_i0e": _SERIES, "bessel_i1e": _SERIES, "igamma": _SERIES, "igammac": _SERIES, "igamma_grad_a": _SERIES,
  "polygamma": _SERIES, "zeta": _SERIES, "regularized_incomplete_beta": _SERIES,
  # autodiff internals
  "custom_lin": "an internal primitive of JAX's linearization; it never reaches a traced program",
}
