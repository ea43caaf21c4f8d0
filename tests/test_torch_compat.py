"""What fxrewrite reads of torch internals that differ between the torch
releases it supports, tested on whichever torch runs the suite by imitating
the other releases' shapes."""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from fxrewrite.inductor_pass import _mark_fake_tensors_current, mark_current


def _graph() -> tuple[torch.fx.Graph, list[torch.fx.Node]]:
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.ops.aten.sin.default, (x,))
    g.output(y)
    return g, [y]


class Updater211:
    """torch 2.11's ``FakeTensorUpdater``, as far as fxrewrite uses it: the
    graph as ``.graph``, no ``gm``, no ``tracked_node_ids``."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        self.graph = graph
        self.processed_hashes: set[Any] = set()

    def hash_node(self, node: torch.fx.Node) -> Any:
        return (node, node.target, id(node.args), id(node.kwargs))


class Updater215(Updater211):
    """torch 2.15's: the graph module as ``.gm``, and ``tracked_node_ids``."""

    def __init__(self, graph: torch.fx.Graph) -> None:
        super().__init__(graph)
        del self.graph
        self.gm = torch.fx.GraphModule(torch.nn.Module(), graph)
        self.tracked_node_ids: set[int] = set()


def post_grad_passes(updater: Any, graph: torch.fx.Graph, changed: list[torch.fx.Node]) -> bool:
    # Named as Inductor's function, with its local: the pass finds the
    # running updater on the stack by these two names.
    fake_tensor_updater = updater
    assert fake_tensor_updater is not None
    return _mark_fake_tensors_current(graph, changed)


def test_marks_current_in_a_2_11_updater():
    # On 2.11, not marking made its updater recompute the users of the
    # rewritten nodes, and its sameness test fails on the plain int of a
    # static sym_size under dynamic shapes: every compile with a marked
    # dynamic dimension and a clone failed ("Unknown type <class 'int'>").
    g, changed = _graph()
    updater = Updater211(g)
    assert post_grad_passes(updater, g, changed)
    assert updater.processed_hashes == {updater.hash_node(n) for n in changed}


def test_marks_current_in_a_2_15_updater():
    g, changed = _graph()
    updater = Updater215(g)
    assert post_grad_passes(updater, g, changed)
    assert updater.processed_hashes == {updater.hash_node(n) for n in changed}
    assert updater.tracked_node_ids == {id(n) for n in changed}


def test_an_updater_of_another_graph_is_left_alone():
    g, changed = _graph()
    other, _ = _graph()
    for updater in (Updater211(other), Updater215(other)):
        assert not post_grad_passes(updater, g, changed)
        assert not updater.processed_hashes


def test_an_updater_without_hashes_is_not_marked():
    _, changed = _graph()
    assert not mark_current(object(), changed)


def test_tags_newer_than_this_torch_are_read_as_absent():
    # torch.Tag.out and .inplace are newer than 2.11: encode reads them with
    # getattr, and an operator without them is simply not an out= operator.
    from fxrewrite import encode

    names = {tag.name for _, tag in encode._TAGS}
    assert "nondeterministic_seeded" in names
    assert ("out" in names) == hasattr(torch.Tag, "out")
