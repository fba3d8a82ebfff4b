// The C interface of libattnzoo_sentencepiece, the module through which SentencePieceModel
// (sentencepiece_model.h) uses libsentencepiece.
//
// Why a module: Debian's libsentencepiece exports a global FLAGS_minloglevel (an absl::Flag)
// and LibTorch's libc10 exports its own (an int). In one process the dynamic linker binds
// libsentencepiece's references to whichever comes first, libc10's, and libsentencepiece's static
// initialiser then builds its flag object over libc10's globals: caffe2_use_fatal_for_enforce
// turns true, and every failed CAFFE_ENFORCE of LibTorch (a CPU allocation that fails, for one)
// aborts the process instead of throwing c10::Error. So libsentencepiece is loaded only when a
// SentencePiece model is used, with RTLD_DEEPBIND, which binds its references to its own
// definitions first (sentencepiece_model.cpp). Strings cross the boundary as (pointer, size)
// pairs and through an AttnzooSpSink, so that no allocation made on one side is freed on the
// other and no C++ exception crosses it.
#pragma once

#include <stddef.h>
#include <stdint.h>

// 1 when the module is loaded with RTLD_DEEPBIND. The sanitizers' runtimes refuse that flag (it
// would bind the module's malloc and friends past their interceptors), so a sanitized build
// loads it without, and there libsentencepiece's flag still lands on libc10's.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define ATTNZOO_SP_DEEPBIND 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define ATTNZOO_SP_DEEPBIND 0
#endif
#endif
#ifndef ATTNZOO_SP_DEEPBIND
#define ATTNZOO_SP_DEEPBIND 1
#endif

extern "C" {

// Receives bytes: the function is called once per string given back (once per piece by encode).
struct AttnzooSpSink {
  void* context;
  void (*append)(void* context, const char* data, size_t size);
};

// Every function that can fail returns 0 on success, or 1 with the library's message given to
// `error`.
struct AttnzooSpApi {
  // The processor of a serialized model (a .model file's bytes), or null with the error.
  void* (*load)(const char* bytes, size_t size, AttnzooSpSink error);
  void (*free)(void* processor);
  int64_t (*size)(const void* processor);
  // id in [0, size): the caller checks.
  int (*id_to_piece)(const void* processor, int id, AttnzooSpSink out, AttnzooSpSink error);
  int (*encode)(const void* processor, const char* text, size_t size, AttnzooSpSink pieces,
                AttnzooSpSink error);
  int (*decode_pieces)(const void* processor, const char* const* pieces, const size_t* sizes,
                       size_t count, AttnzooSpSink out, AttnzooSpSink error);
  int (*decode_ids)(const void* processor, const int* ids, size_t count, AttnzooSpSink out,
                    AttnzooSpSink error);
};

// The module's one exported symbol: its functions, or null when `version` is not the one it was
// built with.
#define ATTNZOO_SP_API_VERSION 1
typedef const AttnzooSpApi* (*AttnzooSpGetApi)(int version);
const AttnzooSpApi* attnzoo_sentencepiece_api(int version);
}
