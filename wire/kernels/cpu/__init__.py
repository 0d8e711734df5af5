"""C sources of the built-in CPU kernels and the problems (calling convention, inputs and
reference) that the cpu backend checks and times them against."""
