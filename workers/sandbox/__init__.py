"""Where a trial is compiled and run: stages, the child process, isolation, warm runners."""
