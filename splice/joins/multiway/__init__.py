"""The multiway join of Diba's stages (and TPC-H Q3's fused three-way join)."""

__all__: list[str] = []
