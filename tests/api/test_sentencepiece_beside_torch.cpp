// libsentencepiece in a process that runs LibTorch (decoding/sentencepiece_plugin.h): both export
// a global FLAGS_minloglevel, and when libsentencepiece's references bind to libc10's, its static
// initialiser writes over libc10's flags, caffe2_use_fatal_for_enforce among them, and a failed
// allocation aborts the process instead of throwing. Loaded as attnzoo loads it, through its
// module with RTLD_DEEPBIND, libc10's flags are untouched and LibTorch still throws. Linking
// libsentencepiece into attnzoo_decoding (as before the module) fails both checks here, and the
// allocation then kills this test binary.
#include <attnzoo/decoding/error.h>
#include <attnzoo/decoding/sentencepiece_model.h>
#include "common/test_util.h"
#include "decoding/sentencepiece_plugin.h"

#include <c10/util/Flags.h>
#include <c10/util/Logging.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <string>

// libc10's (defined when it is built without glog, as the PyPI wheels are).
C10_DECLARE_int32(minloglevel);

namespace attnzoo {
namespace test_sentencepiece_beside_torch {

TEST(SentencePieceBesideLibTorch, LibTorchStillThrowsOnceTheLibraryIsLoaded) {
#if !ATTNZOO_SP_DEEPBIND
  GTEST_SKIP() << "sanitized builds load the module without RTLD_DEEPBIND, which their "
                  "runtimes refuse";
#endif
  const auto path = testing::fresh_dir("sentencepiece_beside_torch") + "/not_a_model.model";
  std::ofstream(path) << "these bytes are no ModelProto";
  // The module, and so libsentencepiece, is loaded before the file is parsed.
  try {
    decoding::SentencePieceModel model(path);
    FAIL() << "a text file was accepted as a SentencePiece model";
  } catch (const decoding::UnitsError& e) {
    EXPECT_NE(std::string(e.what()).find("not a SentencePiece model"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(FLAGS_caffe2_use_fatal_for_enforce);
  EXPECT_EQ(FLAGS_minloglevel, 0);
  // 1 PiB: beyond any address space, so the allocator's CAFFE_ENFORCE fails.
  EXPECT_THROW(torch::empty({int64_t{1} << 50}, torch::kByte), c10::Error);
}

}  // namespace test_sentencepiece_beside_torch
}  // namespace attnzoo
