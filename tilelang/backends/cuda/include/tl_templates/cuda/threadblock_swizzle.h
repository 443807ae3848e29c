// Copyright (c) tilelang contributors. Licensed under the MIT license.
//
// tl_templates/cuda/threadblock_swizzle.h -- block rasterization for T.use_swizzle.
//
// The hardware launches blocks roughly in linear order id = blockIdx.x + blockIdx.y *
// gridDim.x. For a GEMM-like grid (x: tile column, y: tile row) that order walks one
// whole row of output tiles before moving on, so the B tiles are re-read from DRAM for
// every row. Rasterization remaps the linear id to a new (x, y) that walks the grid in
// panels of `panel_width` rows (or columns), boustrophedon between panels, so blocks
// that run together share A and B tiles in L2. The mapping is a bijection on
// [0, gridDim.x) x [0, gridDim.y); blockIdx.z is passed through.
//
//   tl::rasterization2DRow<panel_width>()    -> dim3: panels of panel_width rows (y);
//                                               inside a panel ids go down the rows first
//   tl::rasterization2DColumn<panel_width>() -> dim3: panels of panel_width columns (x);
//                                               inside a panel ids go along the columns
//   tl::rasterization2DRowX<pw>() / RowY / ColumnX / ColumnY  -> int, one coordinate
//   tl::rasterize_2d_row(pw, bx, by, gx, gy) / tl::rasterize_2d_column(...)
//        the same arithmetic on explicit values, usable on the host (returns uint2)
//
// The last panel may be narrower when gridDim is not a multiple of panel_width.
#ifndef TL_TEMPLATES_CUDA_THREADBLOCK_SWIZZLE_H_
#define TL_TEMPLATES_CUDA_THREADBLOCK_SWIZZLE_H_

#include "common.h"

namespace tl {

// Row panels: panel p holds rows [p * pw, p * pw + rows); ids inside it are laid out
// column by column (rows fastest). Odd panels walk the columns right to left.
TL_HOST_DEVICE uint2 rasterize_2d_row(unsigned int panel_width, unsigned int bx, unsigned int by,
                                      unsigned int gx, unsigned int gy) {
  const unsigned int id = bx + by * gx;
  const unsigned int panel_size = panel_width * gx;
  const unsigned int panel = id / panel_size;
  const unsigned int offset = id % panel_size;
  const unsigned int remaining_rows = gy - panel * panel_width;
  const unsigned int rows = remaining_rows < panel_width ? remaining_rows : panel_width;
  unsigned int col = offset / rows;
  const unsigned int row = panel * panel_width + offset % rows;
  if (panel & 1u) col = gx - 1u - col;
  return make_uint2(col, row);
}

// Column panels: panel p holds columns [p * pw, p * pw + cols); ids inside it are laid
// out row by row (columns fastest). Odd panels walk the rows bottom to top.
TL_HOST_DEVICE uint2 rasterize_2d_column(unsigned int panel_width, unsigned int bx,
                                         unsigned int by, unsigned int gx, unsigned int gy) {
  const unsigned int id = bx + by * gx;
  const unsigned int panel_size = panel_width * gy;
  const unsigned int panel = id / panel_size;
  const unsigned int offset = id % panel_size;
  const unsigned int remaining_cols = gx - panel * panel_width;
  const unsigned int cols = remaining_cols < panel_width ? remaining_cols : panel_width;
  unsigned int row = offset / cols;
  const unsigned int col = panel * panel_width + offset % cols;
  if (panel & 1u) row = gy - 1u - row;
  return make_uint2(col, row);
}

template <unsigned int panel_width>
TL_DEVICE dim3 rasterization2DRow() {
  static_assert(panel_width > 0, "rasterization2DRow: panel_width must be positive");
  const uint2 r = rasterize_2d_row(panel_width, blockIdx.x, blockIdx.y, gridDim.x, gridDim.y);
  return dim3(r.x, r.y, blockIdx.z);
}

template <unsigned int panel_width>
TL_DEVICE dim3 rasterization2DColumn() {
  static_assert(panel_width > 0, "rasterization2DColumn: panel_width must be positive");
  const uint2 r =
      rasterize_2d_column(panel_width, blockIdx.x, blockIdx.y, gridDim.x, gridDim.y);
  return dim3(r.x, r.y, blockIdx.z);
}

// Scalar forms for lowered code that reads one coordinate through T.call_extern:
// int bx = tl::rasterization2DRowX<8>(); int by = tl::rasterization2DRowY<8>();
template <unsigned int panel_width>
TL_DEVICE int rasterization2DRowX() {
  return static_cast<int>(rasterization2DRow<panel_width>().x);
}
template <unsigned int panel_width>
TL_DEVICE int rasterization2DRowY() {
  return static_cast<int>(rasterization2DRow<panel_width>().y);
}
template <unsigned int panel_width>
TL_DEVICE int rasterization2DColumnX() {
  return static_cast<int>(rasterization2DColumn<panel_width>().x);
}
template <unsigned int panel_width>
TL_DEVICE int rasterization2DColumnY() {
  return static_cast<int>(rasterization2DColumn<panel_width>().y);
}

}  // namespace tl

#endif  // TL_TEMPLATES_CUDA_THREADBLOCK_SWIZZLE_H_
