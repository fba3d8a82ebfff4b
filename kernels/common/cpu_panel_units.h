// How the CPU's panel products (linear_cpu, int8_matmul) split an [M, N] output into units of
// work: a row tile (up to `tile_rows` rows) against a panel (32 output columns of the packed
// weight). The units are (row chunk, panel, row tile), in that order: a chunk is as many tiles as
// keep their rows of x within `chunk_bytes` (in L2 while every panel passes over them); a thread
// takes a contiguous range of units, so it sweeps the panels over its chunk's tiles, and two
// threads split a single chunk (a batch of 1) by panels.
#pragma once

#include <algorithm>
#include <cstdint>

namespace attnzoo::kernels::cpu {

struct PanelUnit {
  int64_t row;    // first row of the tile
  int rows;       // rows in the tile (the last tile may have fewer than tile_rows)
  int64_t panel;  // panel index: output columns [32·panel, 32·panel + 32)
};

class PanelUnits {
 public:
  // m rows of x, `row_bytes` bytes each, against `panels` panels.
  PanelUnits(int64_t m, int64_t row_bytes, int64_t panels, int tile_rows, int64_t chunk_bytes)
      : m_(m), panels_(panels), tile_rows_(tile_rows), tiles_((m + tile_rows - 1) / tile_rows) {
    const int64_t tile_bytes = tile_rows * std::max<int64_t>(row_bytes, 1);
    chunk_tiles_ = std::clamp<int64_t>(chunk_bytes / tile_bytes, 1, std::max<int64_t>(tiles_, 1));
  }

  int64_t count() const { return tiles_ * panels_; }

  PanelUnit operator[](int64_t u) const {
    const int64_t chunk_units = chunk_tiles_ * panels_;
    const int64_t chunk = u / chunk_units;
    const int64_t first_tile = chunk * chunk_tiles_;
    const int64_t tiles = std::min(chunk_tiles_, tiles_ - first_tile);
    const int64_t local = u - chunk * chunk_units;
    const int64_t row = (first_tile + local % tiles) * tile_rows_;
    return {row, static_cast<int>(std::min<int64_t>(tile_rows_, m_ - row)), local / tiles};
  }

 private:
  int64_t m_, panels_;
  int tile_rows_;
  int64_t tiles_, chunk_tiles_ = 1;
};

}  // namespace attnzoo::kernels::cpu

// TILE(R) for R = rows, 1 <= rows <= 12, R a constant expression: each row count of a 12-row
// tile (the last tile of a product may have fewer) gets a tile function of its own, fully
// unrolled.
#define ATTNZOO_SWITCH_TILE_ROWS(rows, TILE) \
  switch (rows) {                            \
    case 1:                                  \
      TILE(1);                               \
      break;                                 \
    case 2:                                  \
      TILE(2);                               \
      break;                                 \
    case 3:                                  \
      TILE(3);                               \
      break;                                 \
    case 4:                                  \
      TILE(4);                               \
      break;                                 \
    case 5:                                  \
      TILE(5);                               \
      break;                                 \
    case 6:                                  \
      TILE(6);                               \
      break;                                 \
    case 7:                                  \
      TILE(7);                               \
      break;                                 \
    case 8:                                  \
      TILE(8);                               \
      break;                                 \
    case 9:                                  \
      TILE(9);                               \
      break;                                 \
    case 10:                                 \
      TILE(10);                              \
      break;                                 \
    case 11:                                 \
      TILE(11);                              \
      break;                                 \
    default:                                 \
      TILE(12);                              \
      break;                                 \
  }
