"""The library's own launch settings: the block is the row rounded up to a power of two and the
warps grow with it (a fixed rule of the row size, as such libraries ship)."""

from __future__ import annotations

from dataclasses import dataclass

MAX_BLOCK = 65536


@dataclass(frozen=True)
class CKernel:
    """A kernel as the cpu backend reads one: its C source and the symbol to call."""

    src: str
    __name__: str


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 1 else 1


def calculate_settings(n: int) -> tuple[int, int]:
    """(BLOCK_SIZE, num_warps) for rows of n elements."""
    block = next_power_of_2(n)
    if block > MAX_BLOCK:
        raise RuntimeError(f"rows of {n} elements exceed the largest block, {MAX_BLOCK}")
    if block >= 16384:
        return block, 16
    if block >= 4096:
        return block, 8
    return block, 4
