"""The thresholds file the canary bake reads on the test fleet (the bake tests and the rollout benchmark):
one profile for any model, whose baseline acceptance is the stand-in server's (about 2.8 and more), so a
bake holds the canary to the old nodes and to that baseline as it would hold a real model to its own."""

THRESHOLDS = """\
profiles:
  - name: test-fleet
    match: ["*"]
    acceptance:
      prose: {min_mean_accept_length: 1.0}
    baseline_accept_length: {prose: 2.8}
"""
