"""The model-based test of derived state: Hypothesis's stateful testing drives every way in
(adds of every kind, cancels, retries, runs, flow settings) and every loss of Redis's or the
counts' state on real servers, and checks after each step that nothing derived outranks the
table (test_derived_state.py)."""
