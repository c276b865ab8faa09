// Cutting a micro-batch along its sequence (reference/fast-llm.md §5.4, §6.3): `schedule.micro_batch_splits` = k cuts
// each sample's sequence into k consecutive splits that run one after the other (the later ones attend to the keys of
// the earlier ones, carried by attention); `model.distributed.sequence_data_parallel` = s makes the s ranks of a
// sequence-data group read the same samples and keep one part each of every split (rank r: the r-th 1/s of it),
// attention gathering the keys over the group. Split j of a sequence of T tokens covers rows [j, j + 1) * T / k; this
// rank's piece of it is rows j * T / k + r * T / (k s) onwards, T / (k s) of them.
//
// A piece is a MicroBatch whose per-token tensors (tokens, labels, positions, reference model outputs) are views of
// the whole micro-batch's rows, whose cu_seqlens hold the documents cut to its rows, and whose sequence_piece says
// where it sits (layers/context.h). Positions stay those of the whole sequence (per document), so position
// embeddings, rotary and the labels are those of the unsplit micro-batch.
// Refused with a clear error: a sequence that does not divide into k s equal pieces, preference pairs (DPO rows of
// the whole micro-batch) and policy-gradient token data (GSPO sums over whole documents).
#pragma once

#include <cstdint>
#include <vector>

#include "fast_llm/layers/context.h"

namespace fast_llm::engine {

struct SequenceLayout {
  int splits = 1;                  // schedule.micro_batch_splits
  int sequence_data_parallel = 1;  // model.distributed.sequence_data_parallel
  int sequence_data_rank = 0;
  distributed::Communicator* sequence_data = nullptr;  // the sequence-data group (null: one rank)

  bool cuts() const { return splits > 1 || sequence_data_parallel > 1; }
};

// This rank's `layout.splits` pieces of `batch` (a whole sequence on the device), split 0 first. `sequence` is the
// micro-batch's index in the step (SequencePiece::sequence); the pieces' `index` is left for the caller to set.
std::vector<layers::MicroBatch> sequence_pieces(const layers::MicroBatch& batch, int64_t sequence,
                                                const SequenceLayout& layout, Stream stream);

}  // namespace fast_llm::engine
