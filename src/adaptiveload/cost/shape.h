#pragma once
// The shape of one micro-batch: its samples, grouped by bucket. Every cost model prices a
// micro-batch by its shape (CostModel::cost, group_cost, MemoryModel::bytes), so a micro-batch
// may hold samples of several buckets (a pack: one token sequence, each sample attending only
// to itself) as well as samples of one (a bucketed micro-batch, the special case, one part).
//
// A shape refers to its buckets, it does not copy them: the buckets must outlive it. Up to four
// buckets are held without allocating; reuse one object across large packs (clear(), then
// add()) to keep its storage.
#include <cstdint>
#include <vector>

#include "adaptiveload/geometry/geometry.h"

namespace adaptiveload {

struct ShapePart {
  const Bucket* bucket = nullptr;
  int64_t count = 0;  // samples of that bucket
};

class MicroShape {
 public:
  MicroShape() = default;
  // `count` samples of bucket b: a bucketed micro-batch (no allocation).
  static MicroShape uniform(int64_t count, const Bucket& b) {
    MicroShape s;
    s.add(b, count);
    return s;
  }

  // The parts, in the order their buckets first appeared.
  struct Parts {
    const ShapePart* first;
    const ShapePart* last;
    const ShapePart* begin() const { return first; }
    const ShapePart* end() const { return last; }
    size_t size() const { return size_t(last - first); }
    const ShapePart& operator[](size_t i) const { return first[i]; }
  };
  Parts parts() const {
    const ShapePart* p = n_ <= kInline ? inline_ : heap_.data();
    return {p, p + n_};
  }

  void clear() { n_ = 0, heap_.clear(); }
  // Adds `count` samples of bucket b (to b's part when it has one).
  void add(const Bucket& b, int64_t count = 1) {
    if (count <= 0) return;
    ShapePart* p = n_ <= kInline ? inline_ : heap_.data();
    for (size_t i = n_; i-- > 0;)
      if (p[i].bucket == &b) {
        p[i].count += count;
        return;
      }
    if (n_ < kInline) {
      inline_[n_++] = {&b, count};
      return;
    }
    if (n_ == kInline) heap_.assign(inline_, inline_ + kInline);
    heap_.push_back({&b, count});
    ++n_;
  }

  bool empty() const { return n_ == 0; }
  // One bucket: the micro-batch every bucketed strategy writes.
  bool is_uniform() const { return n_ == 1; }
  int64_t samples() const {
    int64_t n = 0;
    for (const ShapePart& p : parts()) n += p.count;
    return n;
  }
  // Sum of the samples' video tokens, sum_i S_i.
  int64_t tokens() const {
    int64_t n = 0;
    for (const ShapePart& p : parts()) n += p.count * p.bucket->tokens;
    return n;
  }

 private:
  static constexpr size_t kInline = 4;
  ShapePart inline_[kInline];
  size_t n_ = 0;
  std::vector<ShapePart> heap_;  // every part, once there are more than kInline
};

}  // namespace adaptiveload
