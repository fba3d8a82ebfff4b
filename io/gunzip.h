// gzip files (RFC 1952: one member, or several concatenated, as `cat a.gz b.gz` makes) inflated
// into memory, for archives that must be read at random places afterwards (a gzipped .nemo
// tar). zlib checks each member's CRC-32 and length; the output is bounded by the caller's limit
// and by deflate's own maximum ratio, so a small hostile file cannot claim unbounded memory.
// Errors are CheckpointError naming the file. Standard library and zlib only (fuzzed with the
// tar reader).
#pragma once

#include <attnzoo/io/byte_source.h>

#include <cstdint>
#include <string>

namespace attnzoo::io {

// Whether `source` starts with gzip's magic bytes (1f 8b).
bool is_gzip(const ByteSource& source);

// The inflated bytes of every member. More than `max_bytes` of output (or more than 1032 times
// the input, deflate's limit) is an error naming the limit; so are a truncated or corrupt
// stream, a CRC or length mismatch, and bytes after the last member that are not another one.
std::string gunzip(const ByteSource& source, uint64_t max_bytes);

}  // namespace attnzoo::io
