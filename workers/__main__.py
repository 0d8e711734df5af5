"""`python -m workers --server URL --token T --pool P`: the worker agent alone."""

from workers.cli import main

main()
