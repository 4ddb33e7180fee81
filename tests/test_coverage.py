"""The rule tables are honest: every JAX primitive is native, inlined or listed as not native (with a reason),
never two of these and never none; and docs/primitives.md is what the tables say."""
import pathlib

import pytest

import tinyjax.backends.tinygrad  # noqa: F401  (fills the rule table)
from tinyjax import coverage
from tinyjax.backends.tinygrad.not_native import NOT_YET_NATIVE
from tinyjax.backends.tinygrad.table import COMPLEX_RULES, RULES
from tinyjax.ir.program import CALL_PARAMS
from tinyjax.ir.spmd import COLLECTIVES

DOCS = pathlib.Path(__file__).parent.parent / "docs" / "primitives.md"


@pytest.mark.parametrize("name", sorted(coverage.jax_primitive_names()))
def test_primitive_in_exactly_one_place(name):
  places = [table for table, keys in (("rules", RULES.keys() | COMPLEX_RULES.keys()), ("inlined", CALL_PARAMS),
                                      ("collective", COLLECTIVES), ("not native", NOT_YET_NATIVE)) if name in keys]
  assert len(places) == 1, f"{name} is in {places or 'no table'}"


def test_not_native_entries_have_reasons():
  assert all(reason.strip() for reason in NOT_YET_NATIVE.values())


def test_docs_table_is_generated_from_the_rules():
  assert DOCS.read_text() == coverage.markdown(), "regenerate: tinyjax coverage --markdown > docs/primitives.md"


def test_settings_doc_is_generated():
  from tinyjax import config
  assert (DOCS.parent / "settings.md").read_text() == config.markdown()
