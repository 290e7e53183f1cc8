// A running template's state saved and restored rank by rank (Tenplex,
// Wagenländer et al. SOSP'24: the job's state as a parallelizable tensor
// collection). Each rank writes the segments of parameters and optimizer slots
// it owns (parallel::Strategy::State) into its own shard file, and on a relaunch
// in any layout each rank reads exactly the regions its new segments cover,
// straight into the template's storage. No rank gathers or reads a tensor it
// does not own.
//
// Names in the collection: "model/<param>", "optim/<slot>/<param>" (each with the
// parameter's global shape) and "optim/step" (a 0-d int64, written by rank 0).
// A frozen parameter (layer-wise fine-tuning, LoRA's base weights) has no
// "optim/" entries: no template holds optimizer state for it. Checkpoints from
// before that rule hold zeros there, which a restore skips.
// The old whole-model checkpoints (layout 1×1×1, the same names) load the same way.
//
// The commit protocol is the trainer's: every rank Finish()es (fsync) its shard,
// the ranks agree that all succeeded, then one rank writes the metadata
// atomically (checkpoint/writer.h). Torch-using; kept out of headers the
// operator sees.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "worker/checkpoint/reader.h"
#include "worker/checkpoint/writer.h"
#include "worker/parallel/strategy.h"
#include "worker/train/state_io.h"

namespace orrery::train {

checkpoint::TensorSpec CollectionSpec(const std::string& qualified, const std::string& parameter,
                                      const std::vector<int64_t>& shape,
                                      const std::string& model_kind);

// Adds this rank's segments (those it is the writer of) to `writer`, plus
// "optim/step" when `write_scalars`. Copies only device tensors, one segment at
// a time, to the host; host tensors are written from their own memory.
Status WriteLocalState(checkpoint::ShardWriter& writer, parallel::Strategy& strategy,
                       const std::string& model_kind, bool write_scalars, StateIoStats* stats);

// Reads every segment of this rank's state from `reader` into the template and
// calls StateRestored. A checkpoint without optimizer state (parameters only)
// restores the parameters and starts the optimizer afresh; `optimizer_restored`
// says which. A tensor missing from the checkpoint, or of another shape or
// dtype, is an error naming it.
// With options.exact, the checksum pieces of blocks this rank read only in part
// go to `partial` (checkpoint/reader.h), for the trainer to check together with
// the other ranks' (VerifyPiecesTogether).
Status LoadLocalState(const checkpoint::CheckpointReader& reader, parallel::Strategy& strategy,
                      const checkpoint::LoadOptions& options, StateIoStats* stats,
                      std::vector<checkpoint::BlockPiece>* partial,
                      bool* optimizer_restored = nullptr);

// Every rank's partial pieces, exchanged over `world` (null: this rank alone):
// checks every block they tile together; a block still not tiled is read whole
// by each rank that has a piece of it (its bytes added to stats->bytes). DATA_LOSS
// on any mismatch, on the rank that found it. Collective.
Status VerifyPiecesTogether(const checkpoint::CheckpointReader& reader,
                            const std::vector<checkpoint::BlockPiece>& mine,
                            dist::Communicator* world, StateIoStats* stats);

// Peak-memory bracketing for an operation (see StateIoStats::peak_rss_bytes).
// Resetting the kernel's high-water mark would lose the process's lifetime
// peak, so the scope folds it into LifetimePeakRss() first.
class PeakRssScope {
 public:
  PeakRssScope();  // resets the high-water mark
  uint64_t before() const { return before_; }
  uint64_t Peak() const;

 private:
  uint64_t before_ = 0;
};

// The process's peak resident memory since it started, across every
// PeakRssScope's reset; and its resident memory now (0 where unreadable).
uint64_t LifetimePeakRss();
uint64_t CurrentRss();

}  // namespace orrery::train
