// Byte-range arithmetic behind the KV transfer planner (kv_layout.h), kept
// free of any KV vocabulary so it can be reasoned about on its own.
//
//   ForEachGridRun   a 2-D grid of equal elements, strided one way on the
//                    source and another way on the destination, as the
//                    fewest runs contiguous on both sides.
//   AppendCoalesced  appends a copy range, extending the previous one when
//                    the new one continues it on both sides.
//   SortAndCoalesce  sorts copy ranges by destination, merges neighbours
//                    contiguous on both sides, and reports overlapping
//                    destinations (two copies writing the same bytes).
//
// The range type is a template parameter with the fields src_region,
// src_offset, dst_region, dst_offset and length (connector::CopyRange).
// Offsets never overflow here: callers bound every region below 2^52 bytes.
#ifndef MOONCAKE_CONNECTOR_INTERNAL_STRIDED_RANGES_H_
#define MOONCAKE_CONNECTOR_INTERNAL_STRIDED_RANGES_H_

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "mooncake/base/assert.h"

namespace mooncake::connector_internal {

// One axis of a copy grid: `count` steps, each `src_stride` bytes on the
// source and `dst_stride` bytes on the destination.
struct GridDim {
  uint64_t count = 0;
  uint64_t src_stride = 0;
  uint64_t dst_stride = 0;
};

// Calls emit(src_offset, dst_offset, length) once per run covering the
// elements {src + i*a.src_stride + j*b.src_stride} -> {dst + i*a.dst_stride +
// j*b.dst_stride}, i < a.count, j < b.count, each `element_bytes` long.
//
// An axis whose stride equals the run length on both sides is folded into the
// run (repeatedly, so a grid contiguous on both sides becomes one run). With
// two axes left, the one with the larger destination stride is the outer loop,
// so runs come out in increasing destination order whenever the strides allow.
template <typename Emit>
void ForEachGridRun(uint64_t src, uint64_t dst, uint64_t element_bytes, GridDim a, GridDim b,
                    Emit&& emit) {
  MC_DASSERT(element_bytes > 0, "grid elements have a size");
  if (a.count == 0 || b.count == 0) return;
  GridDim dims[2];
  int n = 0;
  for (const GridDim& d : {a, b}) {
    if (d.count > 1) dims[n++] = d;
  }
  uint64_t run = element_bytes;
  for (bool folded = true; folded && n > 0;) {
    folded = false;
    for (int k = 0; k < n; ++k) {
      if (dims[k].src_stride == run && dims[k].dst_stride == run) {
        run *= dims[k].count;
        dims[k] = dims[--n];
        folded = true;
        break;
      }
    }
  }
  if (n == 0) {
    emit(src, dst, run);
    return;
  }
  if (n == 1) {
    for (uint64_t i = 0; i < dims[0].count; ++i) {
      emit(src + i * dims[0].src_stride, dst + i * dims[0].dst_stride, run);
    }
    return;
  }
  if (dims[1].dst_stride > dims[0].dst_stride) std::swap(dims[0], dims[1]);
  const GridDim& outer = dims[0];
  const GridDim& inner = dims[1];
  for (uint64_t i = 0; i < outer.count; ++i) {
    const uint64_t s = src + i * outer.src_stride;
    const uint64_t d = dst + i * outer.dst_stride;
    for (uint64_t j = 0; j < inner.count; ++j) {
      emit(s + j * inner.src_stride, d + j * inner.dst_stride, run);
    }
  }
}

// True when `next` starts where `prev` ends on both sides (same regions).
template <typename Range>
bool RangeContinues(const Range& prev, const Range& next) {
  return prev.src_region == next.src_region && prev.dst_region == next.dst_region &&
         prev.src_offset + prev.length == next.src_offset &&
         prev.dst_offset + prev.length == next.dst_offset;
}

template <typename Range>
void AppendCoalesced(std::vector<Range>& out, const Range& r) {
  MC_DASSERT(r.length > 0, "copy ranges are never empty");
  if (!out.empty() && RangeContinues(out.back(), r)) {
    out.back().length += r.length;
  } else {
    out.push_back(r);
  }
}

template <typename Range>
bool RangeDstLess(const Range& x, const Range& y) {
  return x.dst_region != y.dst_region ? x.dst_region < y.dst_region : x.dst_offset < y.dst_offset;
}

// Sorts `ranges` by (dst_region, dst_offset) and merges neighbours contiguous
// on both sides. Returns the index (after sorting) of the first range whose
// destination overlaps its predecessor's, or nullopt when the destinations are
// disjoint; on overlap the vector is sorted but not merged.
template <typename Range>
std::optional<size_t> SortAndCoalesce(std::vector<Range>& ranges) {
  // A plan for one layer with ascending block ids is usually emitted sorted.
  if (!std::is_sorted(ranges.begin(), ranges.end(), RangeDstLess<Range>)) {
    std::sort(ranges.begin(), ranges.end(), RangeDstLess<Range>);
  }
  for (size_t i = 1; i < ranges.size(); ++i) {
    const Range& prev = ranges[i - 1];
    const Range& cur = ranges[i];
    if (prev.dst_region == cur.dst_region && prev.dst_offset + prev.length > cur.dst_offset) {
      return i;
    }
  }
  size_t kept = 0;
  for (size_t i = 0; i < ranges.size(); ++i) {
    if (kept > 0 && RangeContinues(ranges[kept - 1], ranges[i])) {
      ranges[kept - 1].length += ranges[i].length;
    } else {
      ranges[kept++] = ranges[i];
    }
  }
  ranges.resize(kept);
  return std::nullopt;
}

}  // namespace mooncake::connector_internal

#endif  // MOONCAKE_CONNECTOR_INTERNAL_STRIDED_RANGES_H_
