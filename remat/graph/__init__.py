"""The torch-free graph: ``RematGraph`` and synthetic training-step graphs."""
from remat.graph.core import GRAPH_FORMAT, RematGraph
from remat.graph.generators import linear, op_chain, random_dag, training_graph, unet

__all__ = ["GRAPH_FORMAT", "RematGraph", "linear", "op_chain", "random_dag", "training_graph",
           "unet"]
