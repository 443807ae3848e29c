"""What a tile-op lowering may ask about the place it is lowered at."""

from __future__ import annotations

from dataclasses import dataclass, field

from tvm_tirx import ir, sym


@dataclass
class LowerContext:
    """Target name, the ranges of enclosing loop/launch variables, and an analyzer over them."""

    backend: str
    ranges: dict = field(default_factory=dict)  # Var -> (begin, extent)
    threads: int = 1
    _analyzer: sym.Analyzer | None = None

    def with_range(self, var, begin, extent) -> LowerContext:
        ranges = dict(self.ranges)
        ranges[var] = (begin, extent)
        return LowerContext(self.backend, ranges, self.threads)

    @property
    def analyzer(self) -> sym.Analyzer:
        if self._analyzer is None:
            ctx = sym.ConstraintContext()
            for var, (begin, extent) in self.ranges.items():
                ctx.append(sym.RangeConstraint(var, ir.Range.from_min_extent(begin, extent)))
            self._analyzer = sym.Analyzer()
            self._analyzer.sync_constraint_context(ctx)
        return self._analyzer

    def prove(self, cond) -> bool:
        """Whether ``cond`` holds for every value of the enclosing variables."""
        if isinstance(cond, bool):
            return cond
        return bool(self.analyzer.can_prove(cond))

    def simplify(self, expr):
        return self.analyzer.simplify(expr)
