// The tokenizer of a model with a CTC or transducer head: the token table, text joining and
// SentencePiece model of its config's `decoding:` section (decoding/tokenizer.h), checked against
// the heads' vocabulary.
// What the recognizer decodes with and what CTC training tokenizes transcripts with.
#pragma once

#include <attnzoo/configs/model_config.h>
#include <attnzoo/decoding/tokenizer.h>

namespace attnzoo {

// Throws c10::ValueError naming the config when it has no CTC or transducer head or no decoding
// section (with the key to set), and UnitsError (file and line) for a token table that cannot be
// read or whose size is not the heads' vocabulary.
decoding::Tokenizer model_tokenizer(const ModelConfig& config);

}  // namespace attnzoo
