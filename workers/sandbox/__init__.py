"""Where a trial is compiled and run, each phase in a sandbox process.

  context   the execution context handed to every entry point (cache, sandbox, runners,
            CPUs, cancel, on-phase)
  stages    a trial's compile and run stages (compile_trial, run_trial, execute_trial)
  phases    one phase in its sandbox process: timeout, cancel, limits, how it ended
  sandbox   the Sandbox: work directory, commands, environment, limits, sweeps
  jobs      a job directory as the agent and its sandbox see it
  watch     waiting on a sandbox process: timeout, cancel, disk limit, reported phase
  runner    warm runners: one sandbox process serving trial after trial
  child     the inside: the process that runs a phase
  isolation, limits, procs, files: isolation levels, rlimits, finding and killing
            processes, reading what a sandbox wrote
"""
