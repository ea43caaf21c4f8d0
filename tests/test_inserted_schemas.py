"""The command line tool adds aten nodes (clones, views, size queries) to
graphs read from `.fxir` files, which carry schemas only for the operators
they already call; it takes the schemas of the added ones from its own table
(`rust/plan/apply/schemas.rs`). Each entry must say what torch's own
`OpOverload._schema` says, or a rewritten saved graph would describe its new
nodes differently from the live graph the pass rewrites."""

from __future__ import annotations

import pytest

from fxrewrite import _core
from fxrewrite.encode import schema_facts
from fxrewrite.fx_meta import aten

TABLE = _core.inserted_op_schemas()


def test_the_table_covers_clones_views_and_size_queries():
    assert {"aten::clone.default", "aten::as_strided.default", "aten::sym_size.int"} <= set(TABLE)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_schema_matches_torch(name):
    args, returns, tags = TABLE[name]
    t_args, t_returns, t_tags = schema_facts(aten(name))
    assert [tuple(a) for a in args] == [tuple(a) for a in t_args]
    assert [tuple(r) for r in returns] == [tuple(r) for r in t_returns]
    assert tags == t_tags
