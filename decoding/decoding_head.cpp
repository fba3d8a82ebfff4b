#include <attnzoo/decoding/decoding_head.h>

namespace attnzoo::decoding {

const char* to_string(DecodingHead head) {
  return head == DecodingHead::kCtc ? "ctc" : "transducer";
}

const char* to_string(TransducerSearch search) {
  return search == TransducerSearch::kGreedy ? "greedy" : "beam";
}

}  // namespace attnzoo::decoding
