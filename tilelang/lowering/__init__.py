"""lowering."""
