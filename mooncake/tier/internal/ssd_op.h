// SsdOp and SsdIo: one SSD tier operation (a write, read or remove of one
// record) and its submission queue entries, as the tier builds them and its
// lanes complete them (ssd_lane.h).
//
// Thread-safety: an op belongs to one thread at a time: the caller that
// builds it until its ios are submitted, then its lane's reaper. (io_uring's
// submission and completion order the hand-over: uring.h's SetData/Data.)
#ifndef MOONCAKE_TIER_INTERNAL_SSD_OP_H_
#define MOONCAKE_TIER_INTERNAL_SSD_OP_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "mooncake/base/fast_hash.h"
#include "mooncake/tier/internal/record_codec.h"
#include "mooncake/tier/internal/record_index.h"
#include "mooncake/tier/internal/staging_arena.h"
#include "mooncake/tier/tier.h"

namespace mooncake::tier_internal {

enum class OpType : uint8_t { kWrite, kRead, kRemove };

struct SsdOp;

// One submission queue entry. `op` is null for syncs and the lane's markers.
struct SsdIo {
  // What a completion without an op is: a sync, or one of the lane's markers.
  enum class Kind : uint8_t {
    kSync,
    kTimer,    // a background-sync timeout (GroupCommit's kArmTimer)
    kStop,     // the destructor's: the reaper returns
    kHurry,    // the destructor's: cancel the lane's pending timeouts
    kIgnored,  // a timeout removal's own completion
  };
  SsdOp* op = nullptr;
  uint32_t file = 0;
  uint32_t index = 0;  // piece number within op, or the file of a sync
  uint32_t lane = 0;
  std::byte* data = nullptr;
  uint32_t bytes = 0;       // transferred (a block multiple)
  uint32_t payload = 0;     // payload bytes in it that the checksum covers
  uint64_t offset = 0;      // in the file
  bool fixed = false;       // data lies in the lane's registered arena
  Kind kind = Kind::kSync;  // when op is null
};

struct SsdOp {
  OpType type = OpType::kRead;
  uint32_t lane = 0;
  RecordIndex::RecordPtr record;
  std::vector<SsdIo> ios;
  uint32_t pending = 0;  // ios not yet completed; reaper-owned after submission
  int error = 0;         // first failure (-errno)
  Staging staging;
  // Reads: pieces complete in any order and are hashed in order.
  std::span<std::byte> into;
  std::vector<uint8_t> piece_done;
  uint32_t hashed = 0;
  FastStableHasher64 hash;
  std::byte* tail_src = nullptr;  // zero-copy read: last piece staged here
  std::byte* tail_dst = nullptr;
  uint64_t tail_bytes = 0;
  bool zero_copy = false;
  // Compressed reads: stored bytes [0, arrived) have landed (in order).
  uint64_t arrived = 0;
  DecodeProgress decode;
  bool landed = false;  // in its lane's list of reads to decode
  tier::WriteDone write_done;
  tier::ReadDone read_done;

  bool compressed_read() const {
    return type == OpType::kRead && record->header.codec != kCodecRaw;
  }
  // Hashes the pieces that completed, in order, as far as they go.
  void AdvanceReadHash() {
    while (hashed < ios.size() && piece_done[hashed]) {
      const SsdIo& io = ios[hashed];
      hash.Update(io.data, io.payload);
      arrived += io.payload;
      ++hashed;
    }
  }
};

}  // namespace mooncake::tier_internal

#endif  // MOONCAKE_TIER_INTERNAL_SSD_OP_H_
