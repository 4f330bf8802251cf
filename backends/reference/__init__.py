"""Graph-level reference execution: every op evaluated by the numpy semantics in
dialects/graph/reference. The answer every lower level must agree with."""
