// NumPy's .npy format (numpy.lib.format, versions 1.0, 2.0 and 3.0), and the .npz archives of
// them that numpy.savez and savez_compressed write (a zip of <name>.npy entries):
//
//   "\x93NUMPY" [major][minor] [header length: u16 (1.0) or u32 (2.0, 3.0), little-endian]
//   [header: a Python dict literal {'descr': '<f8', 'fortran_order': False, 'shape': (80,), }]
//   [data: the elements, C or Fortran order]
//
// Numbers only: booleans, signed and unsigned integers and floats of 1 to 8 bytes, little-endian
// or single-byte. Object arrays (pickles, which np.load refuses by default too), strings,
// structured and big-endian types are refused by name. The header is parsed as the literal it
// is, not evaluated, and checked against the bytes that follow before any element is read.
// Torch-free (fuzzed on its own, tests/fuzz/fuzz_cmvn_stats.cpp); errors are CheckpointError
// naming the source.
#pragma once

#include <attnzoo/io/byte_source.h>
#include <attnzoo/io/zip_archive.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnzoo::io {

struct NpyHeader {
  char kind = 'f';   // 'b' bool, 'i' signed, 'u' unsigned, 'f' floating point
  int itemsize = 8;  // bytes per element
  bool fortran_order = false;
  std::vector<int64_t> shape;  // () for a scalar
  uint64_t count = 1;          // elements: the product of the shape
  uint64_t data_offset = 0;    // where the elements start in the source
};

// Whether `source` starts with .npy's magic string.
bool is_npy(const ByteSource& source);

// The header of the .npy held in `source`, checked: the data it describes lies within the source.
NpyHeader parse_npy_header(const ByteSource& source);

// Every element as a double, in C (row-major) order whatever the file's order. 64-bit integers
// beyond 2^53 lose their low bits, as NumPy's own conversion to float64 does.
std::vector<double> read_npy_values(const ByteSource& source, const NpyHeader& header);

// One array of an .npz or .npy file, as doubles (read_npy_values).
struct NpyArray {
  std::vector<int64_t> shape;
  std::vector<double> values;
};

// The arrays of an .npz archive by name (without ".npy"). An entry larger than `max_entry_bytes`
// is refused before it is read; entries that are not .npy files are refused.
std::map<std::string, NpyArray> read_npz(const ByteSource& source,
                                         uint64_t max_entry_bytes = uint64_t{1} << 30);

}  // namespace attnzoo::io
