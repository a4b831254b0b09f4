"""Static inspection: the cell tree, parameter ownership, the construct graph, source AST."""
