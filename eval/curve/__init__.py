"""`eval curve`: students trained at N conversations, each point an `eval compare`, and the curve's report."""
