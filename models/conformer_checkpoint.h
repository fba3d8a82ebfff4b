// Conformer checkpoints in the layouts users bring, mapped onto the model's own names
// (models/conformer.h):
//   attnzoo      layers.{i}.ffn1.linear1.weight, layers.{i}.attn.mha.qkv.weight, ... (as is)
//   torchaudio   torchaudio.models.Conformer's state_dict:
//                conformer_layers.{i}. (-> layers.{i}.)
//                  ffn{1,2}.sequential.{0,1,4}            -> ffn{1,2}.{norm,linear1,linear2}
//                  self_attn_layer_norm                   -> attn_norm
//                  self_attn.in_proj_{weight,bias}        -> attn.mha.qkv (rows [q; k; v])
//                  self_attn.out_proj                     -> attn.mha.proj
//                  conv_module.layer_norm                 -> conv.norm
//                  conv_module.sequential.{0,2,3,5}       -> conv.{pointwise_conv1,
//                                                            depthwise_conv, conv_norm,
//                                                            pointwise_conv2}
//                  final_layer_norm                       -> final_norm
//   wenet        WeNet's ConformerEncoder + CTC state_dict, onto ConformerEncoder's names
//                (models/conformer.h; normalize_before, macaron, rel_pos):
//                encoder.global_cmvn.{mean,istd}          -> global_cmvn.{mean,istd}
//                encoder.embed.conv.{0,2,4}               -> embed.conv.{0,2,4}
//                encoder.embed.out.0 | encoder.embed.linear (x8) -> embed.out
//                encoder.encoders.{i}. (-> conformer.layers.{i}.)
//                  self_attn.linear_{q,k,v}               -> attn.mha.qkv (rows [q; k; v])
//                  self_attn.linear_out                   -> attn.mha.proj
//                  self_attn.linear_pos, pos_bias_{u,v}   -> attn.linear_pos, attn.pos_bias_{u,v}
//                  feed_forward_macaron.w_{1,2}, norm_ff_macaron -> ffn1.linear{1,2}, ffn1.norm
//                  feed_forward.w_{1,2}, norm_ff          -> ffn2.linear{1,2}, ffn2.norm
//                  norm_mha                               -> attn_norm
//                  norm_conv (the layer's, before the module) -> conv.norm
//                  conv_module.{pointwise_conv1, depthwise_conv, pointwise_conv2}
//                                                         -> conv.{same names}
//                  conv_module.norm (after the depthwise conv) -> conv.conv_norm
//                  norm_final                             -> final_norm
//                encoder.after_norm                       -> after_norm
//                ctc.ctc_lo                               -> ctc
//                the attention decoder (models/attention_decoder.h): decoder. (U2) or
//                decoder.{left,right}_decoder. (U2++) -> decoder.{left,right}.
//                  embed.0                                -> embed
//                  decoders.{i}.self_attn.linear_{q,k,v}  -> blocks.{i}.self_attn.qkv
//                  decoders.{i}.src_attn.linear_q         -> blocks.{i}.src_attn.q
//                  decoders.{i}.src_attn.linear_{k,v}     -> blocks.{i}.src_attn.kv (rows [k; v])
//                  decoders.{i}.{self,src}_attn.linear_out -> blocks.{i}.{self,src}_attn.proj
//                  decoders.{i}.feed_forward.w_{1,2}      -> blocks.{i}.mlp.fc{1,2}
//                  decoders.{i}.norm{1,2,3}, after_norm, output_layer (as is)
//                (a model without a decoder ignores them: ConformerFamily's loader)
//                ignored: encoder.embed.pos_enc.*, decoder embed.1.pe (computed)
//   espnet       ESPnet's Conformer encoder (espnet.nets...conformer.encoder.Encoder, ESPnet2's
//                ConformerEncoder) in an ASR model's state_dict: the same encoder.* and ctc.*
//                names as WeNet, plus GlobalMVN's statistics
//                normalize.mean, normalize.std            -> global_cmvn.mean, global_cmvn.istd
//                                                            (istd = 1 / std)
//                ignored: decoder.*, frontend.* (the feature extractor's constants)
//   nemo         NeMo's ConformerEncoder and CTC head (ConvASRDecoder), a .nemo file's
//                model_weights.ckpt:
//                encoder.pre_encode.conv.{i}, .out        -> embed.conv.{i}, embed.out
//                encoder.layers.{i}. (-> conformer.layers.{i}.)
//                  norm_feed_forward{1,2}, feed_forward{1,2}.linear{1,2}
//                                                         -> ffn{1,2}.norm, ffn{1,2}.linear{1,2}
//                  norm_self_att                          -> attn_norm
//                  self_attn.linear_{q,k,v}               -> attn.mha.qkv (rows [q; k; v])
//                  self_attn.linear_out                   -> attn.mha.proj
//                  self_attn.linear_pos, pos_bias_{u,v}   -> attn.linear_pos, attn.pos_bias_{u,v}
//                  self_attn.global_{q,k,v}               -> attn.global_qkv (rows [q; k; v])
//                  norm_conv                              -> conv.norm
//                  conv.{pointwise_conv1, depthwise_conv, pointwise_conv2} -> conv.{same}
//                  conv.batch_norm (any norm kind)        -> conv.conv_norm
//                  norm_out                               -> final_norm
//                encoder.pos_bias_{u,v} (untie_biases: false, shared) -> every block's
//                decoder.decoder_layers.0 | ctc_decoder.decoder_layers.0 (a hybrid's CTC head),
//                  Conv1d [V, D, 1]                       -> ctc [V, D]
//                the transducer (models/transducer.h):
//                  decoder.prediction.embed               -> transducer.embed
//                  decoder.prediction.dec_rnn.lstm.*      -> transducer.lstm.*
//                  joint.enc, joint.pred, joint.joint_net.2 -> transducer.enc, .pred, .out
//                (a model built without a transducer ignores transducer.*: ConformerFamily)
//                ignored: preprocessor.* (window, mel filters), encoder.pos_enc.*
// wenet and espnet also take a bare encoder's own state_dict (embed.*, encoders.*, after_norm.*,
// global_cmvn.*: the Encoder module saved alone), read as if every name had the encoder. prefix.
// This is the one place where those layouts are known.
#pragma once

#include <attnzoo/io/safetensors.h>

#include <set>
#include <string>

namespace attnzoo {

enum class ConformerCheckpointFormat { kAttnzoo, kTorchaudio, kWenet, kEspnet, kNemo };

// "attnzoo" | "torchaudio" | "wenet" | "espnet" | "nemo"; throws naming the accepted names.
ConformerCheckpointFormat parse_conformer_format(const std::string& name);
const char* conformer_format_name(ConformerCheckpointFormat format);

// Guesses the layout from the tensor names (WeNet and ESPnet share theirs: normalize.* tells
// ESPnet; encoder.pre_encode.* and encoder.layers.* are NeMo's).
ConformerCheckpointFormat detect_conformer_format(const io::TensorDict& tensors);

struct MappedConformerCheckpoint {
  io::TensorDict tensors;         // the model's names
  std::set<std::string> ignored;  // source tensors with no counterpart
};

// Renames into the model's layout. Unknown names are kept as they are, so that the strict loader
// reports them.
MappedConformerCheckpoint to_conformer_layout(const io::TensorDict& tensors,
                                              ConformerCheckpointFormat format);

}  // namespace attnzoo
