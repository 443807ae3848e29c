"""tilelang: a Python DSL for tile-level GPU kernels, compiled through TVM's TIRx."""
