// PyTorch checkpoints read in C++: files written by torch.save itself (tests/io/
// make_checkpoint_reference.py) in both formats and every pickle protocol it offers, compared
// element for element with the same tensors written by the `safetensors` package; training
// checkpoints, DDP names, sharded indexes; and the files that must be refused, each with the
// message a user needs.
#include <attnzoo/core/error.h>
#include <attnzoo/io/pickle.h>
#include <attnzoo/io/weights_file.h>
#include <attnzoo/io/zip_archive.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/test_util.h"

#include <filesystem>
#include <fstream>
#include <string>

namespace attnzoo::io {
namespace test_torch_checkpoint {

using testing::error_of;
using ::testing::HasSubstr;

const std::string kRef = ATTNZOO_CHECKPOINT_REFERENCE_DIR;

std::string ref_file(const std::string& name) { return kRef + "/" + name; }

WeightsFileOptions with_key(const std::string& key) {
  WeightsFileOptions options;
  options.key = key;
  return options;
}

// Every tensor of `expected` (a safetensors file) equals the one of the same name in `loaded`,
// bit for bit, with its dtype and shape; and `loaded` holds nothing else.
void expect_same(const TensorDict& loaded, const std::string& expected_file) {
  const auto expected = load_safetensors(expected_file).tensors;
  EXPECT_EQ(loaded.size(), expected.size());
  for (const auto& item : expected) {
    SCOPED_TRACE(item.key());
    ASSERT_TRUE(loaded.contains(item.key()));
    const auto& got = loaded[item.key()];
    EXPECT_EQ(got.scalar_type(), item.value().scalar_type());
    EXPECT_EQ(got.sizes(), item.value().sizes());
    EXPECT_TRUE(torch::equal(got, item.value()));
  }
}

TEST(TorchCheckpoint, ReadsEveryDtypeOfTheZipFormat) {
  const auto file = load_weights_file(ref_file("dtypes.pth"));
  EXPECT_EQ(file.format, "torch.save zip");
  expect_same(file.tensors, ref_file("dtypes.expected.safetensors"));
  EXPECT_TRUE(file.notes.empty());
}

TEST(TorchCheckpoint, SharedStoragesOffsetsAndStridesAreViews) {
  const auto views = load_weights_file(ref_file("views.pth")).tensors;
  expect_same(views, ref_file("views.expected.safetensors"));
  // Tied weights and slices view one storage, read once.
  EXPECT_EQ(views["embed.weight"].data_ptr(), views["head.weight"].data_ptr());
  EXPECT_TRUE(views["base"].is_alias_of(views["column"]));
  EXPECT_EQ(views["column"].stride(0), 8);
  EXPECT_EQ(views["column"].storage_offset(), 3);
  EXPECT_EQ(views["expanded"].stride(0), 0);
  EXPECT_FALSE(views["transposed"].is_contiguous());
}

TEST(TorchCheckpoint, ReadsTheLegacyFormat) {
  const auto file = load_weights_file(ref_file("legacy.pth"));
  EXPECT_EQ(file.format, "torch.save legacy");
  expect_same(file.tensors, ref_file("legacy.expected.safetensors"));
}

TEST(TorchCheckpoint, ReadsPickleProtocols4And5) {
  for (const char* name : {"protocol4.pth", "protocol5.pth"}) {
    SCOPED_TRACE(name);
    expect_same(load_weights_file(ref_file(name)).tensors, ref_file("views.expected.safetensors"));
  }
}

TEST(TorchCheckpoint, ReadsDeflatedEntries) {
  expect_same(load_weights_file(ref_file("deflated.pth")).tensors,
              ref_file("dtypes.expected.safetensors"));
}

TEST(TorchCheckpoint, SwapsBigEndianStorages) {
  expect_same(load_weights_file(ref_file("big_endian.pth")).tensors,
              ref_file("dtypes.expected.safetensors"));
}

TEST(TorchCheckpoint, TrainingCheckpointWithTwoStateDictsNeedsAKey) {
  const auto message =
      error_of<CheckpointError>([] { load_weights_file(ref_file("training.pth")); });
  EXPECT_THAT(message, HasSubstr("training.pth: holds several state dicts (state_dict, "
                                 "state_dict_ema): choose one"));
  EXPECT_THAT(message, HasSubstr("--key state_dict"));
  for (const char* key : {"state_dict", "state_dict_ema"}) {
    SCOPED_TRACE(key);
    const auto file = load_weights_file(ref_file("training.pth"), with_key(key));
    expect_same(file.tensors, ref_file(std::string("training_") + key + ".expected.safetensors"));
    EXPECT_EQ(file.notes.at(0), std::string("the state dict under '") + key + "'");
  }
  // Its other entries (args as an argparse.Namespace, numpy metrics, the optimizer) are read
  // without a global outside the allow-list, and a key that is not there lists those present.
  const auto missing = error_of<CheckpointError>(
      [] { load_weights_file(ref_file("training.pth"), with_key("ema")); });
  EXPECT_THAT(missing, HasSubstr("has no entry 'ema'; its keys: epoch (12), arch "
                                 "('vit_small_patch16_224'), state_dict (collections.OrderedDict "
                                 "of 4 entries), optimizer (dict of 2 entries), version (2), args "
                                 "(argparse.Namespace of 7 entries)"));
  EXPECT_THAT(missing, HasSubstr("metric (81.250000), best_epoch (9)"));
}

TEST(TorchCheckpoint, FindsWrappedStateDictsAndRemovesTheDdpPrefix) {
  const auto wrapped = load_weights_file(ref_file("wrapped.pth"));
  expect_same(wrapped.tensors, ref_file("training_state_dict.expected.safetensors"));
  EXPECT_EQ(wrapped.notes, std::vector<std::string>{"the state dict under 'model'"});
  const auto ddp = load_weights_file(ref_file("ddp.pth"));
  expect_same(ddp.tensors, ref_file("training_state_dict.expected.safetensors"));
  EXPECT_EQ(ddp.notes,
            std::vector<std::string>{"DistributedDataParallel's prefix 'module.' removed"});
  const auto nested = load_weights_file(ref_file("nested.pth"), with_key("checkpoint/weights"));
  expect_same(nested.tensors, ref_file("training_state_dict.expected.safetensors"));
  EXPECT_THAT(error_of<CheckpointError>([] { load_weights_file(ref_file("nested.pth")); }),
              HasSubstr("no state dict at the top level nor under state_dict, model, module"));
  EXPECT_THAT(error_of<CheckpointError>([] {
                load_weights_file(ref_file("views.expected.safetensors"), with_key("state_dict"));
              }),
              HasSubstr("key 'state_dict' was given, but this is no PyTorch checkpoint"));
}

TEST(TorchCheckpoint, ReadsShardedIndexes) {
  for (const char* index : {"model.safetensors.index.json", "pytorch_model.bin.index.json"}) {
    SCOPED_TRACE(index);
    const auto file = load_weights_file(ref_file(std::string("sharded/") + index));
    expect_same(file.tensors, ref_file("training_state_dict.expected.safetensors"));
    EXPECT_THAT(file.format, HasSubstr("(2 files)"));
  }
}

TEST(TorchCheckpoint, ShardedIndexThatDisagreesWithItsShardsIsRefused) {
  const auto dir = testing::fresh_dir("sharded_bad");
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator(ref_file("sharded"))) {
    fs::copy(entry.path(), dir + "/" + entry.path().filename().string());
  }
  const auto write = [&](const std::string& json) {
    std::ofstream(dir + "/model.safetensors.index.json") << json;
  };
  write(R"({"weight_map": {"0.weight": "../escape.safetensors"}})");
  EXPECT_THAT(
      error_of<CheckpointError>([&] { load_weights_file(dir + "/model.safetensors.index.json"); }),
      HasSubstr("names '../escape.safetensors', not a file beside the index"));
  write(R"({"weight_map": {"0.weight": "model-00001-of-00002.safetensors"}})");
  EXPECT_THAT(
      error_of<CheckpointError>([&] { load_weights_file(dir + "/model.safetensors.index.json"); }),
      HasSubstr("which " + dir + "/model.safetensors.index.json does not list for it"));
  write(R"({"weight_map": {"0.weight": "model-00001-of-00002.safetensors",
                           "0.bias": "model-00001-of-00002.safetensors",
                           "extra": "model-00002-of-00002.safetensors"}})");
  EXPECT_THAT(
      error_of<CheckpointError>([&] { load_weights_file(dir + "/model.safetensors.index.json"); }),
      HasSubstr("model-00002-of-00002.safetensors: holds '1.bias', which"));
  write("{]");
  EXPECT_THAT(
      error_of<CheckpointError>([&] { load_weights_file(dir + "/model.safetensors.index.json"); }),
      HasSubstr("not JSON"));
}

TEST(TorchCheckpoint, PickledObjectsAndCodeAreRefusedByName) {
  EXPECT_THAT(error_of<CheckpointError>([] { load_weights_file(ref_file("evil.pth")); }),
              HasSubstr("evil.pth: refuses to call posix.system: only tensors, containers, "
                        "numbers and strings are read"));
  EXPECT_THAT(error_of<CheckpointError>([] { load_weights_file(ref_file("module.pth")); }),
              HasSubstr("refuses to call torch.nn.modules.linear.Linear"));
  EXPECT_THAT(error_of<CheckpointError>([] { load_weights_file(ref_file("scripted.pt")); }),
              HasSubstr("TorchScript"));
  EXPECT_THAT(
      error_of<CheckpointError>([] { load_weights_file(ref_file("hostile/code_global.pth")); }),
      HasSubstr("refuses to call posix.system"));
}

TEST(TorchCheckpoint, HostileFilesAreRefusedBeforeTheyCostMemory) {
  const std::pair<const char*, const char*> cases[] = {
      {"terabyte_storage", "storage '0' holds 16 bytes; its pickle claims 274877906944 elements"},
      {"short_storage",
       "a tensor of 100 elements reaches element 99 of storage '0', which holds "
       "4 (a storage shorter than its tensor)"},
      {"many_tensors", "more than 50000 tensors"},
      {"nested_lists", "containers nested more than 100 levels deep"},
      {"zip_bomb_claim", "claims to inflate"},
      {"zip_bomb_overlap", "overlaps"},
  };
  for (const auto& [name, message] : cases) {
    SCOPED_TRACE(name);
    const auto path = ref_file(std::string("hostile/") + name + ".pth");
    EXPECT_THAT(error_of<CheckpointError>([&] { load_weights_file(path); }),
                ::testing::AllOf(HasSubstr(path + ": "), HasSubstr(message)));
  }
}

TEST(TorchCheckpoint, DamagedAndTruncatedFilesAreErrors) {
  std::ifstream in(ref_file("views.pth"), std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  const auto dir = testing::fresh_dir("damaged");
  // A flipped byte inside a storage: the CRC says so.
  std::string flipped = bytes;
  const MemorySource source(bytes.data(), bytes.size(), "views.pth");
  const ZipArchive zip(source);
  const auto* storage = zip.find("views/data/0");
  ASSERT_NE(storage, nullptr);
  flipped[storage->data_offset + 5] ^= 0x40;
  std::ofstream(dir + "/flipped.pth", std::ios::binary) << flipped;
  EXPECT_THAT(error_of<CheckpointError>([&] { load_weights_file(dir + "/flipped.pth"); }),
              HasSubstr("zip entry 'views/data/0': CRC-32 mismatch (the file is damaged)"));
  // Cut anywhere: an error, never a crash or a tensor of garbage.
  for (const size_t keep : {size_t{0}, size_t{10}, bytes.size() / 3, bytes.size() / 2,
                            bytes.size() - 30, bytes.size() - 1}) {
    SCOPED_TRACE(keep);
    std::ofstream(dir + "/cut.pth", std::ios::binary | std::ios::trunc) << bytes.substr(0, keep);
    EXPECT_NE(error_of<Error>([&] { load_weights_file(dir + "/cut.pth"); }), "(no error)");
  }
  EXPECT_THAT(error_of<CheckpointError>([&] { load_weights_file(dir); }),
              HasSubstr("is a directory, not a weights file"));
  EXPECT_THAT(error_of<CheckpointError>([&] { load_weights_file(dir + "/none.pth"); }),
              HasSubstr("none.pth: no such file"));
}

// The reader on pickles made by hand: what torch.save never writes, but a file may hold.
std::string pickle_error(const std::string& bytes) {
  return error_of<CheckpointError>([&] { read_pickle(bytes, "p.pkl"); });
}

TEST(Pickle, RefusesWhatIsNotRead) {
  EXPECT_THAT(pickle_error("\x80\x02"), HasSubstr("p.pkl: the pickle ends before its STOP"));
  EXPECT_THAT(pickle_error("\x80\x02X\xff\xff\xff\x7f"), HasSubstr("truncated"));
  // A list appended into itself, again and again: a cycle, bounded as nesting is.
  std::string cycle("\x80\x02]\x94", 4);
  for (int i = 0; i < 101; ++i)
    cycle += std::string(
        "h\x00"
        "a",
        3);
  EXPECT_THAT(pickle_error(cycle + "."), HasSubstr("containers nested more than 100 levels deep"));
  EXPECT_THAT(pickle_error("\x80\x02."), HasSubstr("STOP with an empty stack"));
  EXPECT_THAT(pickle_error("\x80\x02\x82\x01."), HasSubstr("extension codes"));
  EXPECT_THAT(pickle_error("\x80\x02h\x05."), HasSubstr("GET of memo entry 5, never PUT"));
  EXPECT_THAT(pickle_error("\x80\x02"
                           "cbuiltins\neval\n."),
              HasSubstr("refuses to call builtins.eval"));
  EXPECT_THAT(pickle_error("\x80\x02"
                           "ctorch\nFloatStorage\n)R."),
              HasSubstr("REDUCE of torch.FloatStorage, which is read as a name only"));
  EXPECT_THAT(pickle_error("\x80\x02K\x01K\x02"
                           "a."),
              HasSubstr("APPEND on 1"));
  EXPECT_THAT(pickle_error(std::string("\x80\x02X\x02\x00\x00\x00\xc3\x28.", 10)),
              HasSubstr("not UTF-8"));
}

TEST(Pickle, ReadsWhatCheckpointsCarry) {
  // pickle.dumps({"a": [1, 2.5, True, None, b"\x00\x01"], "s": {3}, 7: 1 << 70}, protocol=4)
  const std::string bytes(
      "\x80\x04\x95\x36\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x5d\x94\x28\x4b"
      "\x01\x47\x40\x04\x00\x00\x00\x00\x00\x00\x88\x4e\x43\x02\x00\x01\x94\x65\x8c\x01\x73"
      "\x94\x8f\x94\x28\x4b\x03\x90\x4b\x07\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x40\x75"
      "\x2e",
      65);
  const auto doc = read_pickle(bytes, "p.pkl");
  const auto root = doc.root();
  ASSERT_EQ(doc.kind(root), PickleKind::kDict);
  const auto* a = doc.find(root, "a");
  ASSERT_NE(a, nullptr);
  const auto& items = doc.items(*a);
  ASSERT_EQ(items.size(), 5u);
  EXPECT_EQ(doc.integer(items[0]), 1);
  EXPECT_EQ(doc.number(items[1]), 2.5);
  EXPECT_TRUE(doc.boolean(items[2]));
  EXPECT_EQ(doc.kind(items[3]), PickleKind::kNone);
  EXPECT_EQ(doc.text(items[4]), std::string("\x00\x01", 2));
  EXPECT_EQ(doc.kind(*doc.find(root, "s")), PickleKind::kSet);
  EXPECT_EQ(doc.items(root).size(), 6u);
  EXPECT_EQ(doc.kind(doc.items(root)[5]), PickleKind::kBigInt);
}

}  // namespace test_torch_checkpoint
}  // namespace attnzoo::io
