// Which head of a speech model decodes, and how a transducer head is searched.
#pragma once

namespace attnzoo::decoding {

// "ctc" (the model's CTC head, with ctc_decoder.h's searches and attention_rescoring.h's
// modes) or "transducer" (its transducer head, models/transducer.h).
enum class DecodingHead { kCtc, kTransducer };
const char* to_string(DecodingHead head);

// A transducer head's search: "greedy" (NeMo's GreedyRNNTInfer / GreedyTDTInfer) or "beam"
// (NeMo's strategy beam, models/transducer_beam_search.h).
enum class TransducerSearch { kGreedy, kBeam };
const char* to_string(TransducerSearch search);

}  // namespace attnzoo::decoding
