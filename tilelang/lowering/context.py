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
    #: conditions known to hold here (enclosing ``if``s, :meth:`with_fact`); not a dataclass
    #: field, so subclasses keep their positional constructors
    _facts = ()

    def with_range(self, var, begin, extent) -> LowerContext:
        ranges = dict(self.ranges)
        ranges[var] = (begin, extent)
        out = LowerContext(self.backend, ranges, self.threads)
        out._facts = self._facts
        return out

    def with_fact(self, cond) -> LowerContext:
        """A plain context like this one where ``cond`` (a boolean expression) also holds."""
        out = LowerContext(self.backend, dict(self.ranges), self.threads)
        out._facts = (*self._facts, cond)
        return out

    @property
    def analyzer(self) -> sym.Analyzer:
        if self._analyzer is None:
            ctx = sym.ConstraintContext()
            for var, (begin, extent) in self.ranges.items():
                ctx.append(sym.RangeConstraint(var, ir.Range.from_min_extent(begin, extent)))
            for cond in self._facts:
                ctx.append(sym.PredicateConstraint(cond))
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
