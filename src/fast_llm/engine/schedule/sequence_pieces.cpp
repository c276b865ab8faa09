// The pieces of a micro-batch along its sequence: row views of its per-token tensors and the documents cut to the rows.
#include "fast_llm/engine/schedule/sequence_pieces.h"

#include <fmt/format.h>

#include <algorithm>

#include "fast_llm/core/error.h"

namespace fast_llm::engine {
namespace {

// The document (attention segment) lengths of `batch`, from the host lengths it carries or its CPU cu_seqlens.
std::vector<int64_t> document_lengths(const layers::MicroBatch& batch) {
  if (!batch.sequence_lengths.empty()) return batch.sequence_lengths;
  FLM_CHECK(batch.cu_seqlens.defined() && batch.cu_seqlens.device().is_cpu(), "schedule",
            "cutting a micro-batch on {} without its host sequence lengths", batch.tokens.device().str());
  std::vector<int64_t> lengths;
  const int32_t* offsets = batch.cu_seqlens.data_as<int32_t>();
  const int64_t stride = batch.cu_seqlens.stride(0);
  for (int64_t document = 0; document + 1 < batch.cu_seqlens.numel(); ++document)
    lengths.push_back(int64_t(offsets[(document + 1) * stride]) - offsets[document * stride]);
  return lengths;
}

// The parts of the documents inside rows [begin, end), in order (empty parts left out).
std::vector<int64_t> lengths_within(const std::vector<int64_t>& lengths, int64_t begin, int64_t end) {
  std::vector<int64_t> result;
  int64_t document_begin = 0;
  for (int64_t length : lengths) {
    const int64_t first = std::max(document_begin, begin), last = std::min(document_begin + length, end);
    if (last > first) result.push_back(last - first);
    document_begin += length;
  }
  return result;
}

struct Documents {
  Tensor cu_seqlens;
  int64_t max_seqlen = 0;
};

Documents upload_documents(const std::vector<int64_t>& lengths, Device device, Stream stream) {
  std::vector<int64_t> offsets{0};
  int64_t longest = 0;
  for (int64_t length : lengths) {
    offsets.push_back(offsets.back() + length);
    longest = std::max(longest, length);
  }
  return {Tensor::from_indices(offsets, DType::int32, device, stream), longest};
}

}  // namespace

std::vector<layers::MicroBatch> sequence_pieces(const layers::MicroBatch& batch, int64_t sequence,
                                                const SequenceLayout& layout, Stream stream) {
  const int64_t tokens = batch.num_tokens(), pieces = int64_t(layout.splits) * layout.sequence_data_parallel;
  FLM_CHECK(tokens % pieces == 0, "schedule",
            "a micro-batch of {} tokens does not cut into schedule.micro_batch_splits x "
            "model.distributed.sequence_data_parallel = {} x {} equal pieces",
            tokens, layout.splits, layout.sequence_data_parallel);
  if (!batch.preference_pairs.empty())
    throw NotSupportedError("schedule", "preference pairs (DPO) with schedule.micro_batch_splits or "
                                        "model.distributed.sequence_data_parallel above 1");
  if (batch.advantages.defined() || batch.label_documents.defined())
    throw NotSupportedError("schedule", "policy-gradient token data with schedule.micro_batch_splits or "
                                        "model.distributed.sequence_data_parallel above 1");
  const Device device = batch.tokens.device();
  const std::vector<int64_t> lengths = document_lengths(batch);
  const int64_t split_tokens = tokens / layout.splits, piece_tokens = split_tokens / layout.sequence_data_parallel;
  std::vector<layers::MicroBatch> result;
  result.reserve(size_t(layout.splits));
  for (int split = 0; split < layout.splits; ++split) {
    const int64_t begin = split * split_tokens + layout.sequence_data_rank * piece_tokens, end = begin + piece_tokens;
    const auto rows = [&](const Tensor& tensor) { return tensor.defined() ? tensor.slice(0, begin, end) : Tensor(); };
    layers::MicroBatch piece{.index = batch.index,
                             .tokens = rows(batch.tokens),
                             .labels = rows(batch.labels),
                             .positions = rows(batch.positions),
                             .num_documents = batch.num_documents,
                             .labels_in_step = batch.labels_in_step,
                             .documents_in_step = batch.documents_in_step};
    piece.preference_pairs_in_step = batch.preference_pairs_in_step;
    for (const auto& [name, logits] : batch.reference_logits) piece.reference_logits[name] = rows(logits);
    for (const auto& [name, values] : batch.reference_label_log_probabilities)
      piece.reference_label_log_probabilities[name] = rows(values);
    for (const auto& [model, outputs] : batch.reference_mixer_outputs)
      for (const auto& [block, output] : outputs) piece.reference_mixer_outputs[model][block] = rows(output);
    piece.sequence_lengths = lengths_within(lengths, begin, end);
    Documents own = upload_documents(piece.sequence_lengths, device, stream);
    piece.cu_seqlens = std::move(own.cu_seqlens);
    piece.max_seqlen = own.max_seqlen;
    layers::SequencePiece where{.sequence = sequence,
                                .split = split,
                                .splits = layout.splits,
                                .sequence_tokens = tokens,
                                .split_tokens = split_tokens,
                                .begin = begin,
                                .key_cu_seqlens = {},
                                .key_max_seqlen = 0,
                                .key_sequence_lengths = lengths_within(lengths, 0, (split + 1) * split_tokens),
                                .sequence_data = layout.sequence_data};
    Documents keys = upload_documents(where.key_sequence_lengths, device, stream);
    where.key_cu_seqlens = std::move(keys.cu_seqlens);
    where.key_max_seqlen = keys.max_seqlen;
    piece.sequence_piece = std::move(where);
    result.push_back(std::move(piece));
  }
  return result;
}

}  // namespace fast_llm::engine
