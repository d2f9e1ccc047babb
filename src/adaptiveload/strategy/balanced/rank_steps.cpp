#include "adaptiveload/strategy/balanced/rank_steps.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace adaptiveload {
namespace {

// 4-ary min-heap of (load, bin) with replace-top; ties go to the lowest bin index. Four
// children share a cache line (the array is placed so that each node's four children start
// on a 64-byte boundary), so a sift touches half the levels of a binary heap and one line a
// level (the heap of 10M samples x 1024 ranks is ~1.5M bins); the minimum and second minimum
// are the same as any heap's, so decisions do not depend on the arity or the layout.
class BinHeap {
 public:
  using Entry = std::pair<int64_t, uint32_t>;  // 16 bytes
  explicit BinHeap(uint64_t bins, const std::vector<int64_t>* keys = nullptr)
      : n_(bins), buf_(bins + 4) {
    // Children of i are 4i+1..4i+4: h()[1] on a 64-byte boundary puts every such group on one.
    const auto addr = reinterpret_cast<uintptr_t>(buf_.data() + 1);
    first_ = size_t((64 - addr % 64) % 64) / sizeof(Entry);
    for (uint64_t j = 0; j < bins; ++j)
      h()[j] = {keys ? (*keys)[j] : 0, uint32_t(j)};  // all zero: a heap
    if (keys && bins > 1)
      for (size_t i = (bins - 2) / 4 + 1; i-- > 0;) sift(i);
  }
  const Entry& top() const { return h()[0]; }
  // Load of the second-least-loaded bin (the top's own load when it is alone).
  int64_t second() const {
    const Entry* h = this->h();
    if (n_ == 1) return h[0].first;
    int64_t m = h[1].first;
    for (size_t c = 2; c < n_ && c <= 4; ++c) m = std::min(m, h[c].first);
    return m;
  }
  void replace_top_load(int64_t load) {
    h()[0].first = load;
    sift(0);
  }

 private:
  Entry* h() { return buf_.data() + first_; }
  const Entry* h() const { return buf_.data() + first_; }
  void sift(size_t i) {
    Entry* h = this->h();
    const size_t n = n_;
    const Entry x = h[i];
    for (;;) {
      const size_t c = 4 * i + 1;
      if (c >= n) break;
      // The grandchildren (16 entries, four lines from 4c+5 on) while this level compares.
      const size_t g = 4 * c + 5;
      for (size_t k = 0; k < 16 && g + k < n; k += 4) __builtin_prefetch(h + g + k);
      size_t m = c;
      const size_t e = std::min(c + 4, n);
      for (size_t k = c + 1; k < e; ++k)
        if (h[k] < h[m]) m = k;
      if (!(h[m] < x)) break;
      h[i] = h[m];
      i = m;
    }
    h[i] = x;
  }

  size_t n_;
  std::vector<Entry> buf_;  // n_ entries from first_ (0-3: the alignment above)
  size_t first_ = 0;
};

// Phase two of a two-phase deal: groups the bins into steps by their coarse load, finds the
// level L that the fine work `fine` brings the other steps to (sum over steps of
// W * max(C_t, L) - coarse loads = fine, C_t the heaviest bin of step t), and returns per bin
// the load it should carry beyond L (C_t - L in a step with C_t > L, else 0); the steps with
// C_t > L are recorded in c.fixed_steps.
std::vector<int64_t> phase_two_offsets(BinCounts& c, int W, double fine) {
  const uint64_t bins = c.load.size(), w = uint64_t(W), K = bins / w;
  std::vector<uint32_t> order(bins);
  for (uint64_t j = 0; j < bins; ++j) order[j] = uint32_t(j);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return c.load[a] > c.load[b]; });
  double coarse = 0;
  for (int64_t x : c.load) coarse += double(x);
  std::vector<double> lead(K);
  for (uint64_t t = 0; t < K; ++t) lead[t] = double(c.load[order[t * w]]);
  auto G = [&](double L) {
    double s = 0;
    for (double C : lead) s += double(w) * std::max(C, L);
    return s - coarse;
  };
  double lo = 0, hi = lead[0] + fine / double(bins) + 1;
  for (int it = 0; it < 80 && hi - lo > 0.5; ++it) {
    const double mid = 0.5 * (lo + hi);
    (G(mid) < fine ? lo : hi) = mid;
  }
  const double L = hi;
  std::vector<int64_t> offset(bins, 0);
  for (uint64_t t = 0; t < K && lead[t] > L; ++t)
    for (uint64_t r = 0; r < w; ++r) {
      const uint32_t j = order[t * w + r];
      offset[j] = int64_t(lead[t] - L);
      c.fixed_steps.push_back(j);
    }
  return offset;
}

}  // namespace

// Deals every sample to `bins` bins; with a writer, also writes the plan's ids and
// micro-batches. Both passes make identical decisions.
// long-function: the dealing's hot loop: every decision reads and writes one cache-line record per
// bin, kept local so 10M samples deal without calls per piece
BinCounts deal_bins(uint64_t bins, const DealInputs& in, BinWriter* w) {
  BinCounts c(bins, !w);  // the writing pass keeps only the loads (its decisions need no more)
  c.logged = !w;
  // About one piece per micro-batch of the dual constraint's size, plus the merges.
  if (c.logged) {
    uint64_t pieces = bins;
    for (size_t b : in.order)
      pieces += (in.pool->begin[b + 1] - in.pool->begin[b]) / uint64_t(in.mem_cap[b]) + 1;
    c.log.reserve(pieces);
  }
  // Everything a decision reads or writes of its bin, together: one cache line, not one per
  // array (the bins of 10M samples outgrow the caches). Copied into `c` at the end.
  struct Bin {
    int64_t load = 0;
    int64_t offset = 0;  // phase two: its load beyond the common level
    uint64_t tokens = 0;
    uint32_t samples = 0, mbs = 0, images = 0;
    uint32_t open_count = 0;           // samples in its latest micro-batch
    uint16_t last_bucket = kNoBucket;  // bucket of that micro-batch
  };
  std::vector<Bin> st(bins);
  BinHeap heap(bins);
  if (in.start) {
    if (in.start->load.size() != bins || in.start->offset.size() != bins ||
        in.coarse_threshold > 0 || in.images_first || in.contiguous)
      throw std::logic_error(
          "balanced: start loads need one load and offset per bin and a one-phase deal");
    std::vector<int64_t> keys(bins);
    for (uint64_t j = 0; j < bins; ++j)
      st[j].load = in.start->load[j], st[j].offset = in.start->offset[j],
      keys[j] = st[j].load - st[j].offset;
    heap = BinHeap(bins, &keys);
  }
  // A piece of n samples of bucket b, from position `next` of the pool, to bin j: written (with
  // a writer) or counted and logged (a piece of 2^31 samples or more has no room in a log
  // entry: the deal is then not logged); the bin's open micro-batch grows (merge) or is new.
  auto place = [&](uint32_t j, Bin& s, size_t b, uint64_t next, int64_t n, bool merge) {
    if (w) {
      w->put(*in.pool, j, b, next, n, merge);
    } else {
      s.samples += uint32_t(n);
      s.tokens += uint64_t(n) * uint64_t(in.tokens[b]);
      if (in.image[b]) s.images += uint32_t(n);
      if (!merge) ++s.mbs;
      if (c.logged) {
        if (n < (int64_t(1) << 31)) {
          c.log.push_back(uint64_t(j) << 32 | (merge ? uint64_t(1) << 31 : 0) | uint64_t(n));
        } else {
          c.logged = false;
          std::vector<uint64_t>().swap(c.log);
        }
      }
    }
    if (merge) {
      s.open_count += uint32_t(n);
    } else {
      s.last_bucket = uint16_t(b), s.open_count = uint32_t(n);
    }
  };
  // Given pieces: each whole to the bin of least load - offset (replay_deal writes them).
  if (w && !in.pieces.empty())
    throw std::logic_error("balanced: given pieces are dealt by the counting pass only");
  for (const DealInputs::Piece& p : in.pieces) {
    const auto [load, j] = heap.top();
    Bin& s = st[j];
    place(j, s, p.bucket, 0, int64_t(p.n), false);
    s.load = load + s.offset + p.cost;
    heap.replace_top_load(s.load - s.offset);
  }
  bool phase_two = in.coarse_threshold <= 0;
  // images_first: samples still to cut and the bin being filled.
  bool cutting = in.images_first;
  uint64_t cut_left = 0, cut_bin = 0, cut_have = 0;
  if (cutting)
    for (size_t b : in.order)
      if (in.image[b]) cut_left += in.pool->begin[b + 1] - in.pool->begin[b];
  for (size_t oi = 0; oi < in.order.size() && in.pieces.empty(); ++oi) {
    const size_t b = in.order[oi];
    if (cutting && !in.image[b]) {
      cutting = false;
      std::vector<int64_t> keys(bins);
      for (uint64_t j = 0; j < bins; ++j) keys[j] = st[j].load;
      heap = BinHeap(bins, &keys);
    }
    if (cutting) {
      uint64_t next = in.pool->begin[b];
      const uint64_t end = in.pool->begin[b + 1];
      while (next < end) {
        const uint64_t quota = (cut_left + cut_have + (bins - cut_bin) - 1) / (bins - cut_bin);
        if (cut_have >= quota && cut_bin + 1 < bins) {
          ++cut_bin, cut_have = 0;
          continue;
        }
        const uint32_t j = uint32_t(cut_bin);
        Bin& s = st[j];
        const bool merge = s.last_bucket == b && int64_t(s.open_count) < in.mem_cap[b];
        const int64_t n = std::min<int64_t>(
            {int64_t(std::max<uint64_t>(quota - cut_have, 1)), int64_t(end - next),
             merge ? in.mem_cap[b] - int64_t(s.open_count) : in.mem_cap[b]});
        place(j, s, b, next, n, merge);
        s.load += n * in.per[b] + (merge ? 0 : in.fixed[b]);
        next += uint64_t(n), cut_have += uint64_t(n), cut_left -= uint64_t(n);
      }
      continue;
    }
    if (!phase_two && in.fixed[b] + in.per[b] <= in.coarse_threshold) {
      phase_two = true;
      double fine = 0;  // the rest's work, with one fixed cost per dual-constraint batch
      for (size_t k = oi; k < in.order.size(); ++k) {
        const size_t x = in.order[k];
        const double n = double(in.pool->begin[x + 1] - in.pool->begin[x]);
        fine += n * double(in.per[x]) + double(in.fixed[x]) * std::ceil(n / double(in.mem_cap[x]));
      }
      for (uint64_t j = 0; j < bins; ++j) c.load[j] = st[j].load;
      const std::vector<int64_t> offset = phase_two_offsets(c, in.world_size, fine);
      std::vector<int64_t> keys(bins);
      for (uint64_t j = 0; j < bins; ++j)
        st[j].offset = offset[j], keys[j] = st[j].load - offset[j];
      heap = BinHeap(bins, &keys);
    }
    uint64_t next = in.pool->begin[b];
    const uint64_t end = in.pool->begin[b + 1];
    const int64_t per = in.per[b], fixed = in.fixed[b], cap = in.mem_cap[b];
    // A new micro-batch takes at least min_new samples, so its fixed cost stays a bounded
    // share of it (see plan_balanced).
    const int64_t min_new = in.min_new[b];
    while (next < end) {
      const auto [load, j] = heap.top();
      Bin& s = st[j];
      const bool merge = !in.whole && s.last_bucket == b && int64_t(s.open_count) < cap;
      const int64_t gap = heap.second() - load - (merge ? 0 : fixed);
      int64_t n = in.whole
                      ? cap
                      : std::max<int64_t>(merge ? 1 : min_new, gap > 0 ? (gap + per - 1) / per : 1);
      n = std::min<int64_t>({n, int64_t(end - next), merge ? cap - int64_t(s.open_count) : cap});
      place(j, s, b, next, n, merge);
      next += uint64_t(n);
      s.load = load + s.offset + n * per + (merge ? 0 : fixed);
      heap.replace_top_load(s.load - s.offset);
    }
  }
  for (uint64_t j = 0; j < bins; ++j) {
    c.load[j] = st[j].load;
    if (!w)
      c.samples[j] = st[j].samples, c.mbs[j] = st[j].mbs, c.tokens[j] = st[j].tokens,
      c.images[j] = st[j].images;
  }
  return c;
}

BinWriter lay_out_bins(Plan& plan, const BinCounts& c, const std::vector<uint32_t>& perm,
                       bool pad_empty, uint64_t spare_ids) {
  const uint64_t bins = perm.size();
  BinWriter w;
  w.plan = &plan;
  w.next_sample.resize(bins);
  w.next_mb.resize(bins);
  uint64_t total_samples = 0, total_mbs = plan.rank_begin.back();
  plan.rank_begin.reserve(plan.rank_begin.size() + bins);
  for (uint64_t i = 0; i < bins; ++i) {
    const uint32_t j = perm[i];
    w.next_sample[j] = total_samples;
    w.next_mb[j] = total_mbs;
    total_samples += c.samples[j];
    total_mbs += c.mbs[j] + (pad_empty && c.samples[j] == 0 ? 1 : 0);
    plan.rank_begin.push_back(total_mbs);
  }
  plan.sample_ids.reserve(total_samples + spare_ids);
  plan.sample_ids.resize(total_samples);
  plan.micro_batches.resize(total_mbs);
  return w;
}

// The writing pass of a logged deal_bins(): the same pieces, in the same order, without the heap.
void replay_deal(const BinCounts& c, const DealInputs& in, BinWriter& w) {
  if (!c.logged) throw std::logic_error("balanced: the deal was not logged");
  size_t i = 0;
  if (!in.pieces.empty()) {
    // Given pieces: in their order, each bucket's from its first position on.
    std::vector<uint64_t> next(in.pool->begin.begin(), in.pool->begin.end() - 1);
    for (const DealInputs::Piece& p : in.pieces) {
      if (i == c.log.size()) break;
      const uint64_t e = c.log[i++];
      w.put(*in.pool, uint32_t(e >> 32), p.bucket, next[p.bucket], int64_t(p.n), false);
      next[p.bucket] += p.n;
    }
    if (i != in.pieces.size())
      throw std::logic_error("balanced: the deal's log does not match its pieces");
    return;
  }
  for (size_t b : in.order) {
    uint64_t next = in.pool->begin[b];
    const uint64_t end = in.pool->begin[b + 1];
    while (next < end) {
      const uint64_t e = c.log[i++];
      const int64_t n = int64_t(e & ((uint64_t(1) << 31) - 1));
      w.put(*in.pool, uint32_t(e >> 32), b, next, n, (e >> 31 & 1) != 0);
      next += uint64_t(n);
    }
  }
  if (i != c.log.size()) throw std::logic_error("balanced: the deal's log does not match its pool");
}

// Cuts the pool, bucket by bucket in `in.order`, into consecutive runs of about equal load,
// one per bin: a bin takes samples until its load reaches the remaining work's share, and
// its samples of one bucket are one micro-batch (several past the cap). For many short
// samples (images) this gives few micro-batches per bin, where LPT gives every bin a piece
// of every bucket. Both passes make identical decisions.
BinCounts deal_contiguous(uint64_t bins, const DealInputs& in, BinWriter* w) {
  if (in.start)
    throw std::logic_error("balanced: a contiguous cut lays the bins out anew; no start loads");
  BinCounts c(bins, true);  // its decisions need the sample counts in both passes
  double remaining = in.contiguous_total;
  if (!(remaining > 0))
    for (size_t b : in.order) {
      const double n = double(in.pool->begin[b + 1] - in.pool->begin[b]);
      remaining +=
          n * double(in.per[b]) + double(in.fixed[b]) * std::ceil(n / double(in.mem_cap[b]));
    }
  uint64_t j = 0;
  double target = remaining / double(bins);
  // Samples not yet dealt: every later bin keeps at least one (n >= bins).
  uint64_t left = in.pool->begin.back() - in.pool->begin.front();
  for (size_t b : in.order) {
    uint64_t next = in.pool->begin[b];
    const uint64_t end = in.pool->begin[b + 1];
    const int64_t per = in.per[b], fixed = in.fixed[b], cap = in.mem_cap[b];
    while (next < end) {
      const uint64_t later = bins - j - 1;
      if (j + 1 < bins && c.samples[j] > 0 &&
          (double(c.load[j]) + 0.5 * double(per + fixed) >= target || left <= later)) {
        remaining -= double(c.load[j]);
        ++j;
        target = remaining / double(bins - j);
        continue;
      }
      const double room = target - double(c.load[j]) - double(fixed);
      const double fit = std::ceil(room / double(per));
      int64_t n = j + 1 == bins || fit >= double(end - next) ? int64_t(end - next)
                                                             : std::max<int64_t>(1, int64_t(fit));
      n = std::min<int64_t>({n, int64_t(end - next), cap});
      if (left > later) n = std::min<int64_t>(n, int64_t(left - later));
      left -= uint64_t(n);
      if (w) w->put(*in.pool, j, b, next, n, false);
      c.add(j, n, in.tokens[b], in.image[b] != 0, true);
      c.load[j] += fixed + n * per;
      next += uint64_t(n);
    }
  }
  return c;
}

}  // namespace adaptiveload
