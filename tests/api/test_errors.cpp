// Every kind of bad input reaches the caller as an attnzoo::Error naming its source, so one catch
// handles them all; the subclass says which kind it was.
#include <attnzoo/configs/model_family.h>
#include <attnzoo/configs/registry.h>
#include <attnzoo/io/safetensors.h>
#include <attnzoo/models/checkpoint.h>
#include <attnzoo/preprocess/audio/read.h>
#include <attnzoo/preprocess/image/decode.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <typeinfo>

namespace attnzoo {
namespace test_errors {

using ::testing::HasSubstr;

// The message of the attnzoo::Error `f` throws, after checking that it is also a `Kind`.
template <typename Kind>
std::string caught_as_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_NE(dynamic_cast<const Kind*>(&e), nullptr) << "caught " << typeid(e).name();
    return e.what();
  }
  ADD_FAILURE() << "no attnzoo::Error";
  return {};
}

TEST(Errors, EachKindOfBadInputIsAnAttnzooError) {
  EXPECT_THAT(caught_as_error<io::SafetensorsError>(
                  [] { io::load_safetensors("no_such_dir/weights.safetensors"); }),
              HasSubstr("no_such_dir/weights.safetensors"));
  EXPECT_THAT(caught_as_error<ConfigError>([] { model_config("no_such_model"); }),
              HasSubstr("no_such_model"));
  EXPECT_THAT(caught_as_error<ImageError>([] { decode_image("no_such_dir/cat.png"); }),
              HasSubstr("no_such_dir/cat.png"));
  EXPECT_THAT(caught_as_error<AudioError>([] { read_audio("no_such_dir/speech.wav"); }),
              HasSubstr("no_such_dir/speech.wav"));

  torch::nn::Linear linear(4, 3);
  io::TensorDict wrong;
  wrong.insert("weight", torch::zeros({3, 5}));
  wrong.insert("bias", torch::zeros({3}));
  LoadOptions load;
  load.source = "linear.safetensors";
  EXPECT_THAT(caught_as_error<CheckpointError>([&] { load_state_dict(*linear, wrong, load); }),
              HasSubstr("linear.safetensors"));

  const auto config = model_config("vit_tiny_patch16_224");
  EXPECT_THAT(caught_as_error<InputError>([&] {
                model_family(config.family)
                    .check_input(config, {torch::zeros({1, 3, 100})}, "batch.safetensors: ");
              }),
              HasSubstr("batch.safetensors: "));
}

}  // namespace test_errors
}  // namespace attnzoo
