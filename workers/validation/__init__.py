"""Validation jobs: a candidate against its baseline over the artifact's shapes.

  stages    the agent's half: compile every configuration, run them in one sandbox
  rounds    the inside of that sandbox: checks, then interleaved rounds
  report    the report from what the stages and the sandbox recorded
  shapes    the extended correctness shapes
"""
