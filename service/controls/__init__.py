"""Compiler controls: the operator's CompileIQ search-space catalog, Booster Packs, and the
Advanced Controls Files studies search and artifacts carry (docs/acf.md)."""
