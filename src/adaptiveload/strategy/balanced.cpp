// balanced (ours): every global step gives each rank about the same amount of work.
//
// The epoch is planned as a whole, as K * W "bins" (one per rank and step). The step count K
// is chosen, from K_lo = ceil(R / (W * C)) (total work R, per-rank step budget C) upwards,
// to minimise the epoch time K * (LB(K * W) + all-reduce), where LB(m) = max(t_1, R / m,
// t_m + t_(m+1)) is the classic lower bound of scheduling sorted items t_1 >= t_2 >= ... on m
// machines; the best few candidates (one past 2M samples) are dealt for real and the fastest
// kept. Fewer steps than that would force two long clips into some bins.
//
// Dealing: samples go longest first (LPT) to the least-loaded bin; once samples are short, a
// bin takes as many of one bucket as bring it level with the next-least-loaded bin (water
// filling), at least enough to pay for a new micro-batch's overhead. Long clips thus spread
// one per bin and short clips and images fill the gaps, so every bin ends within about one
// short sample of the others. A bin's samples of one bucket form one micro-batch (several
// when the dual constraint caps its size); a rank with several micro-batches in a step runs
// them with gradient accumulation. Bins are shuffled into steps, so each step mixes buckets
// and the step order changes with the seed and epoch.
//
// A first pass counts each bin's samples and micro-batches and logs its decisions (bin, count,
// merge: 8 bytes per micro-batch piece, not per sample); the second replays the log and
// writes ids straight into the plan, so the heap is walked once and no list of per-sample
// assignments is kept (~50 bytes per sample at 10M samples x 1024 ranks).
//
// Times are integer nanosecond "ticks" rounded once from the cost model, so every decision is
// integer arithmetic and identical on every rank.
#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>

#include "adaptiveload/strategy/stages.h"
#include "adaptiveload/util/error.h"
#include "adaptiveload/util/rng.h"

namespace adaptiveload {
namespace {

// Step counts dealt for real (a full pass each); past kSearchSamples samples only the one with
// the best lower bound is, which keeps 10M samples x 1024 ranks within seconds.
constexpr size_t kBalancedCandidates = 3;
constexpr uint64_t kSearchSamples = 2'000'000;

// 4-ary min-heap of (load, bin) with replace-top; ties go to the lowest bin index. Four
// children share a cache line (the array is placed so that each node's four children start
// on a 64-byte boundary), so a sift touches half the levels of a binary heap and one line a
// level (the heap of 10M samples x 1024 ranks is ~1.5M bins); the minimum and second minimum
// are the same as any heap's, so decisions do not depend on the arity or the layout.
class BinHeap {
 public:
  using Entry = std::pair<int64_t, uint32_t>;  // 16 bytes
  explicit BinHeap(uint64_t bins, const std::vector<int64_t>* keys = nullptr) : n_(bins), buf_(bins + 4) {
    // Children of i are 4i+1..4i+4: h()[1] on a 64-byte boundary puts every such group on one.
    const auto addr = reinterpret_cast<uintptr_t>(buf_.data() + 1);
    first_ = size_t((64 - addr % 64) % 64) / sizeof(Entry);
    for (uint64_t j = 0; j < bins; ++j) h()[j] = {keys ? (*keys)[j] : 0, uint32_t(j)};  // all zero: a heap
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

struct Inputs {
  const BucketedPool* pool;
  std::vector<size_t> order;  // buckets with samples, longest sample first
  std::vector<int64_t> per, fixed, mem_cap, tokens;
  std::vector<uint8_t> image;    // per bucket: one frame
  std::vector<int64_t> min_new;  // fewest samples a new micro-batch of the bucket takes
  bool whole = false;            // deal whole micro-batches of mem_cap samples (LPT), no merging
  bool contiguous = false;       // deal_contiguous instead of LPT
  // Images first (their buckets lead `order`): the image pool is cut into one run of about
  // equal count per bin, so every bin (and step) holds images, then the rest is dealt LPT
  // onto those loads.
  bool images_first = false;
  double contiguous_total = 0;   // its total load (0: estimated from the batch counts)
  // Two phases (0: one): buckets whose one sample costs more than this ("coarse") are dealt
  // first; then the bins are grouped into steps by their coarse load (W to a step, heaviest
  // first), and the rest ("fine": short clips, images) fills every bin of a step led by a
  // heavy bin up to that bin's level instead of leaving its ranks idle (see deal()).
  int64_t coarse_threshold = 0;
  int world_size = 1;
};

// Where the second pass writes: per bin, its next sample slot and its micro-batch cursor.
struct Writer {
  Plan* plan;
  std::vector<uint64_t> next_sample;
  std::vector<uint64_t> next_mb;

  // Writes n samples of bucket b, from position `next` of the bucketed pool, into bin j:
  // appended to its latest micro-batch (merge) or as a new one.
  void put(const BucketedPool& pool, uint32_t j, size_t b, uint64_t next, int64_t n, bool merge) {
    if (merge) {
      plan->micro_batches[next_mb[j] - 1].count += uint32_t(n);
    } else {
      MicroBatch& mb = plan->micro_batches[next_mb[j]++];
      mb.begin = uint32_t(next_sample[j]);
      mb.count = uint32_t(n);
      mb.bucket = uint16_t(b);
    }
    // Mostly a few ids: a loop, not a memmove call per piece.
    const uint32_t* from = pool.ids.data() + next;
    uint32_t* to = plan->sample_ids.data() + next_sample[j];
    for (int64_t i = 0; i < n; ++i) to[i] = from[i];
    next_sample[j] += uint64_t(n);
  }
};

struct Counts {
  std::vector<int64_t> load;      // ticks per bin
  std::vector<uint32_t> samples;  // per bin
  std::vector<uint32_t> mbs;      // micro-batches per bin
  std::vector<uint64_t> tokens;   // per bin
  std::vector<uint32_t> images;   // per bin: samples of one-frame buckets (the step-mix check)
  std::vector<uint32_t> fixed_steps;  // two phases: bins of the steps led by a heavy bin, step-major
  // deal()'s decisions in order, for replay(): bin << 32 | merge << 31 | samples. Empty when
  // not logged (deal_contiguous, or a piece of 2^31 samples or more: then deal again).
  std::vector<uint64_t> log;
  bool logged = false;

  // Loads only (a writing pass), or with the per-bin statistics.
  Counts(uint64_t bins, bool stats) : load(bins, 0) {
    if (stats) samples.assign(bins, 0), mbs.assign(bins, 0), tokens.assign(bins, 0), images.assign(bins, 0);
  }
  Counts() = default;
  void add(uint32_t j, int64_t n, int64_t tokens_per_sample, bool image, bool new_mb) {
    samples[j] += uint32_t(n);
    tokens[j] += uint64_t(n) * uint64_t(tokens_per_sample);
    if (image) images[j] += uint32_t(n);
    if (new_mb) ++mbs[j];
  }
};

// Phase two of a two-phase deal: groups the bins into steps by their coarse load, finds the
// level L that the fine work `fine` brings the other steps to (sum over steps of
// W * max(C_t, L) - coarse loads = fine, C_t the heaviest bin of step t), and returns per bin
// the load it should carry beyond L (C_t - L in a step with C_t > L, else 0); the steps with
// C_t > L are recorded in c.fixed_steps.
std::vector<int64_t> phase_two_offsets(Counts& c, int W, double fine) {
  const uint64_t bins = c.load.size(), w = uint64_t(W), K = bins / w;
  std::vector<uint32_t> order(bins);
  for (uint64_t j = 0; j < bins; ++j) order[j] = uint32_t(j);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return c.load[a] > c.load[b]; });
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

// Deals every sample to `bins` bins; with a writer, also writes the plan's ids and
// micro-batches. Both passes make identical decisions.
Counts deal(uint64_t bins, const Inputs& in, Writer* w) {
  Counts c(bins, !w);  // the writing pass keeps only the loads (its decisions need no more)
  c.logged = !w;
  // About one piece per micro-batch of the dual constraint's size, plus the merges.
  if (c.logged) {
    uint64_t pieces = bins;
    for (size_t b : in.order) pieces += (in.pool->begin[b + 1] - in.pool->begin[b]) / uint64_t(in.mem_cap[b]) + 1;
    c.log.reserve(pieces);
  }
  // Everything a decision reads or writes of its bin, together: one cache line, not one per
  // array (the bins of 10M samples outgrow the caches). Copied into `c` at the end.
  struct Bin {
    int64_t load = 0;
    int64_t offset = 0;      // phase two: its load beyond the common level
    uint64_t tokens = 0;
    uint32_t samples = 0, mbs = 0, images = 0;
    uint32_t open_count = 0;            // samples in its latest micro-batch
    uint16_t last_bucket = kNoBucket;   // bucket of that micro-batch
  };
  std::vector<Bin> st(bins);
  BinHeap heap(bins);
  bool phase_two = in.coarse_threshold <= 0;
  // images_first: samples still to cut and the bin being filled.
  bool cutting = in.images_first;
  uint64_t cut_left = 0, cut_bin = 0, cut_have = 0;
  if (cutting)
    for (size_t b : in.order)
      if (in.image[b]) cut_left += in.pool->begin[b + 1] - in.pool->begin[b];
  for (size_t oi = 0; oi < in.order.size(); ++oi) {
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
        const int64_t n = std::min<int64_t>({int64_t(std::max<uint64_t>(quota - cut_have, 1)), int64_t(end - next),
                                             merge ? in.mem_cap[b] - int64_t(s.open_count) : in.mem_cap[b]});
        if (w) {
          w->put(*in.pool, j, b, next, n, merge);
        } else {
          s.samples += uint32_t(n), s.images += uint32_t(n), s.tokens += uint64_t(n) * uint64_t(in.tokens[b]);
          if (!merge) ++s.mbs;
          if (c.logged) c.log.push_back(uint64_t(j) << 32 | (merge ? uint64_t(1) << 31 : 0) | uint64_t(n));
        }
        if (merge) {
          s.open_count += uint32_t(n);
        } else {
          s.last_bucket = uint16_t(b), s.open_count = uint32_t(n);
        }
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
      for (uint64_t j = 0; j < bins; ++j) st[j].offset = offset[j], keys[j] = st[j].load - offset[j];
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
      int64_t n = in.whole ? cap : std::max<int64_t>(merge ? 1 : min_new, gap > 0 ? (gap + per - 1) / per : 1);
      n = std::min<int64_t>({n, int64_t(end - next), merge ? cap - int64_t(s.open_count) : cap});
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
      next += uint64_t(n);
      s.load = load + s.offset + n * per + (merge ? 0 : fixed);
      heap.replace_top_load(s.load - s.offset);
    }
  }
  for (uint64_t j = 0; j < bins; ++j) {
    c.load[j] = st[j].load;
    if (!w) c.samples[j] = st[j].samples, c.mbs[j] = st[j].mbs, c.tokens[j] = st[j].tokens, c.images[j] = st[j].images;
  }
  return c;
}

// The writing pass of a logged deal(): the same pieces, in the same order, without the heap.
void replay(const Counts& c, const Inputs& in, Writer& w) {
  size_t i = 0;
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
Counts deal_contiguous(uint64_t bins, const Inputs& in, Writer* w) {
  Counts c(bins, true);  // its decisions need the sample counts in both passes
  double remaining = in.contiguous_total;
  if (!(remaining > 0))
    for (size_t b : in.order) {
      const double n = double(in.pool->begin[b + 1] - in.pool->begin[b]);
      remaining += n * double(in.per[b]) + double(in.fixed[b]) * std::ceil(n / double(in.mem_cap[b]));
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
      int64_t n = j + 1 == bins || fit >= double(end - next) ? int64_t(end - next) : std::max<int64_t>(1, int64_t(fit));
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

// Epoch ticks of a dealing once bins are laid out as steps by `perm`.
int64_t epoch_ticks(const Counts& c, const std::vector<uint32_t>& perm, int W, int64_t allreduce) {
  int64_t total = 0;
  for (size_t t = 0; t < perm.size() / size_t(W); ++t) {
    int64_t mx = 0;
    for (int r = 0; r < W; ++r) mx = std::max(mx, c.load[perm[t * size_t(W) + size_t(r)]]);
    total += mx + allreduce;
  }
  return total;
}

std::vector<uint32_t> shuffled_bins(uint64_t bins, Rng rng) {
  std::vector<uint32_t> perm(bins);
  for (uint64_t j = 0; j < bins; ++j) perm[j] = uint32_t(j);
  rng.shuffle(perm);
  return perm;
}

// Bins laid out step-major, W to a step, with the step order and the ranks in each step
// shuffled.
std::vector<uint32_t> shuffled_steps(const std::vector<uint32_t>& laid, int W, Rng rng) {
  const uint64_t w = uint64_t(W), K = laid.size() / w;
  std::vector<uint32_t> step_perm(K);
  for (uint64_t t = 0; t < K; ++t) step_perm[t] = uint32_t(t);
  rng.shuffle(step_perm);
  std::vector<uint32_t> out(laid.size());
  for (uint64_t t = 0; t < K; ++t) {
    std::copy(laid.begin() + int64_t(step_perm[t] * w), laid.begin() + int64_t((step_perm[t] + 1) * w),
              out.begin() + int64_t(t * w));
    rng.shuffle(out.data() + t * w, w);
  }
  return out;
}

// How far a layout is from the global batch and from a like mix in every step:
// `batch_dev` the largest |x_t - mean| / mean of the steps' tokens (or samples), `unmixed`
// the share of steps without an image while the pool has one for every step, or without a
// clip while it has one for every step.
struct StepSpread {
  double batch_dev = 0, unmixed = 0;
};
StepSpread step_spread(const Counts& c, const std::vector<uint32_t>& perm, int W, bool by_tokens) {
  const uint64_t w = uint64_t(W), K = perm.size() / w;
  uint64_t images = 0, samples = 0;
  for (uint64_t j = 0; j < perm.size(); ++j) images += c.images[j], samples += c.samples[j];
  const bool want_image = images >= K, want_clip = samples - images >= K;
  std::vector<double> x(K, 0);
  double total = 0;
  uint64_t unmixed = 0;
  for (uint64_t t = 0; t < K; ++t) {
    uint64_t im = 0, n = 0;
    for (uint64_t r = 0; r < w; ++r) {
      const uint32_t j = perm[t * w + r];
      x[t] += by_tokens ? double(c.tokens[j]) : double(c.samples[j]);
      im += c.images[j], n += c.samples[j];
    }
    total += x[t];
    if ((want_image && im == 0) || (want_clip && im == n)) ++unmixed;
  }
  StepSpread s;
  const double mean = total / double(std::max<uint64_t>(K, 1));
  if (mean > 0)
    for (double v : x) s.batch_dev = std::max(s.batch_dev, std::abs(v - mean) / mean);
  s.unmixed = double(unmixed) / double(std::max<uint64_t>(K, 1));
  return s;
}

// Lays bins out as steps of W (bins in step-major order) for a global batch target. Bins much
// longer than the median ("tall": a long clip alone costs more than a rank's share of a step)
// go together, W to a step, so that as few steps as possible wait on them; the others are
// dealt in a snake by descending samples (or tokens) over the remaining steps, so that every
// step gets a like mix and about the same global batch. Step order and ranks are shuffled.
std::vector<uint32_t> stratified_bins(const Counts& c, int W, bool by_tokens, bool group_tall, Rng rng) {
  const uint64_t bins = c.load.size(), w = uint64_t(W), K = bins / w;
  if (!group_tall) {
    // Every bin in the snake: the steps' global batches and mixes as even as the bins allow,
    // at the price of steps that wait on one tall bin.
    std::vector<uint32_t> all(bins);
    for (uint64_t j = 0; j < bins; ++j) all[j] = uint32_t(j);
    auto key = [&](uint32_t j) { return by_tokens ? c.tokens[j] : uint64_t(c.samples[j]); };
    std::stable_sort(all.begin(), all.end(), [&](uint32_t a, uint32_t b) { return key(a) > key(b); });
    std::vector<uint32_t> laid(bins);
    for (uint64_t i = 0; i < bins; ++i) laid[snake_step(i, K) * w + i / K] = all[i];
    return shuffled_steps(laid, W, rng);
  }
  std::vector<int64_t> loads(c.load);
  std::nth_element(loads.begin(), loads.begin() + int64_t(bins / 2), loads.end());
  const double median = double(loads[bins / 2]);
  std::vector<uint32_t> tall(c.fixed_steps), rest;
  std::vector<uint8_t> placed(bins, 0);
  for (uint32_t j : tall) placed[j] = 1;
  std::vector<uint32_t> more;
  for (uint64_t j = 0; j < bins; ++j)
    if (!placed[j]) (double(c.load[j]) > 1.02 * median ? more : rest).push_back(uint32_t(j));
  auto by_load = [&](uint32_t a, uint32_t b) { return c.load[a] > c.load[b]; };
  std::stable_sort(more.begin(), more.end(), by_load);
  tall.insert(tall.end(), more.begin(), more.end());
  const uint64_t tall_steps = (tall.size() + w - 1) / w;
  if (tall.size() % w != 0) {
    // Complete the last tall step with the longest of the others.
    std::stable_sort(rest.begin(), rest.end(), by_load);
    const uint64_t need = tall_steps * w - tall.size();
    tall.insert(tall.end(), rest.begin(), rest.begin() + int64_t(need));
    rest.erase(rest.begin(), rest.begin() + int64_t(need));
  }
  std::vector<uint32_t> laid(bins);
  std::copy(tall.begin(), tall.end(), laid.begin());
  const uint64_t K2 = K - tall_steps;
  if (K2 > 0) {
    auto key = [&](uint32_t j) { return by_tokens ? c.tokens[j] : uint64_t(c.samples[j]); };
    std::stable_sort(rest.begin(), rest.end(), [&](uint32_t a, uint32_t b) { return key(a) > key(b); });
    for (uint64_t i = 0; i < rest.size(); ++i) laid[(tall_steps + snake_step(i, K2)) * w + i / K2] = rest[i];
  }
  return shuffled_steps(laid, W, rng);
}

}  // namespace

Plan plan_balanced_micro(const PlanProblem& pr);

Plan plan_balanced(const PlanProblem& pr) {
  if (!pr.bucket_group.empty()) return plan_balanced_groups(pr);
  if (pr.layout.sync == SyncMode::kMicro) return plan_balanced_micro(pr);
  const int W = pr.world_size;
  const size_t nb = pr.buckets->size();
  Plan plan;
  plan.strategy = "balanced";
  plan.world_size = W;
  const BucketedPool pool = shuffled_by_bucket(pr);
  const uint64_t n_samples = pool.ids.size();
  if (n_samples == 0) return plan;
  if (n_samples > UINT32_MAX) throw ConfigError("balanced: more than 2^32 samples in one epoch");

  Inputs in;
  in.pool = &pool;
  in.mem_cap = dual_batch_sizes(pr);  // micro-batches obey the dual constraint
  in.per.resize(nb);
  in.fixed.resize(nb);
  in.tokens.resize(nb);
  in.min_new.resize(nb);
  in.image.resize(nb);
  std::vector<int64_t>& tokens = in.tokens;
  for (size_t b = 0; b < nb; ++b) {
    const Bucket& bk = (*pr.buckets)[b];
    tokens[b] = bk.tokens;
    in.image[b] = bk.frames == 1;
    in.per[b] = to_ticks(pr.cost->marginal_time(1, bk));
    in.fixed[b] = std::max<int64_t>(0, to_ticks(pr.cost->microbatch_time(1, bk)) - in.per[b]);
    // A new micro-batch takes at least enough samples to cover its own overhead.
    in.min_new[b] = std::max<int64_t>(1, (in.fixed[b] + in.per[b] - 1) / in.per[b]);
  }
  const int64_t cap = to_ticks(pr.step_budget_s);
  uint64_t work = 0;      // ticks, without per-micro-batch overheads
  double work_bound = 0;  // ticks, every sample in its own micro-batch (an upper bound)
  for (size_t b = 0; b < nb; ++b) {
    const uint64_t n = pool.begin[b + 1] - pool.begin[b];
    if (n == 0) continue;
    if (in.fixed[b] + in.per[b] > cap)
      throw ConfigError("step budget " + std::to_string(pr.step_budget_s) + " s is below the time of one sample of bucket " +
                        (*pr.buckets)[b].name() + " (" + std::to_string(double(in.fixed[b] + in.per[b]) * 1e-9) +
                        " s); raise --step-budget or leave it on auto");
    work += n * uint64_t(in.per[b]);
    work_bound += double(n) * double(in.per[b] + in.fixed[b]);
    in.order.push_back(b);
  }
  // Loads and epoch times are sums of ticks: refuse an epoch that would not fit them.
  const int64_t allreduce = to_ticks(pr.allreduce_s);
  if (work_bound + double(allreduce) * double(n_samples) > 4e18)
    throw ConfigError(
        "balanced: the epoch's estimated time is beyond 100 years; check the cost model, the "
        "device "
        "preset and --step-budget");
  std::stable_sort(in.order.begin(), in.order.end(), [&](size_t x, size_t y) { return in.per[x] > in.per[y]; });

  const Rng rng = problem_rng(pr, kPurposeBalancedDraw);
  Counts best;
  std::vector<uint32_t> perm;
  int64_t best_ticks = INT64_MAX;
  Inputs chosen = in;
  const uint64_t target = pr.target_steps();
  if (target == 0) {
    // Candidate step counts, by the lower bound of their epoch time.
    // W x cap may exceed 2^64 ticks; then one step holds all the work (work <= 4e18).
    const bool wc_fits = uint64_t(cap) <= UINT64_MAX / uint64_t(W);
    const uint64_t wc = wc_fits ? uint64_t(W) * uint64_t(cap) : UINT64_MAX;
    const uint64_t k_lo = std::max<uint64_t>(1, work / wc + (work % wc != 0 ? 1 : 0));
    const uint64_t k_hi =
        n_samples >= uint64_t(W) ? std::max<uint64_t>(1, n_samples / uint64_t(W)) : 1;
    auto item = [&](uint64_t m) -> int64_t {  // m-th longest sample's ticks, 1-based; 0 past the end
      for (size_t b : in.order) {
        const uint64_t n = pool.begin[b + 1] - pool.begin[b];
        if (m <= n) return in.per[b];
        m -= n;
      }
      return 0;
    };
    std::vector<std::pair<double, uint64_t>> candidates;
    for (uint64_t k = std::min(k_lo, k_hi); k <= k_hi; ++k) {
      const uint64_t m = k * uint64_t(W);
      const double lb = std::max({double(item(1)), double(work) / double(m), double(item(m) + item(m + 1))});
      candidates.push_back({double(k) * (lb + double(allreduce)), k});
      if (double(k) * double(allreduce) > candidates.front().first * 2) break;  // only more all-reduces from here
    }
    std::sort(candidates.begin(), candidates.end());
    candidates.resize(std::min<size_t>(candidates.size(), n_samples <= kSearchSamples ? kBalancedCandidates : 1));

    // First pass: count each candidate, keep the fastest.
    for (const auto& cand : candidates) {
      const uint64_t bins = cand.second * uint64_t(W);
      if (bins > UINT32_MAX) throw ConfigError("balanced: more than 2^32 rank-steps in one epoch");
      Counts counts = deal(bins, in, nullptr);
      std::vector<uint32_t> p = shuffled_bins(bins, rng);
      const int64_t ticks = epoch_ticks(counts, p, W, allreduce);
      if (ticks < best_ticks) best_ticks = ticks, best = std::move(counts), perm = std::move(p);
    }
  } else {
    // The user's global batch fixes the step count (at most one sample per bin). Candidates
    // differ in how large a micro-batch must be: a new one takes at least enough samples that
    // its fixed cost (overhead and small-batch inefficiency) is at most a share `f` of it
    // (f = 1: it only covers itself), or the bucket's whole dual-constraint batches are
    // dealt longest first (LPT). The fastest is kept.
    const uint64_t k_max = n_samples >= uint64_t(W) ? n_samples / uint64_t(W) : 1;
    const uint64_t K = std::max<uint64_t>(1, std::min(target, k_max));
    const uint64_t bins = K * uint64_t(W);
    if (bins > UINT32_MAX) throw ConfigError("balanced: more than 2^32 rank-steps in one epoch");
    const bool by_tokens = pr.batch_kind == BatchKind::kTokens;
    std::vector<Inputs> cands;
    // Per-bin level if every sample were in one micro-batch per bucket and bin: the scale
    // of the two-phase split (coarse: one sample over a fraction of it).
    double level = double(work);
    for (size_t b : in.order)
      level += double(in.fixed[b]) * std::ceil(double(pool.begin[b + 1] - pool.begin[b]) / double(in.mem_cap[b]));
    level /= double(bins);
    const double shares[] = {1.0, 0.25, 0.1};
    const double coarse[] = {0, 1.0 / 8, 1.0 / 3};
    for (double f : shares) {
      for (double q : coarse) {
        if (n_samples > kSearchSamples && (f != 0.25 || q != 1.0 / 8)) continue;
        Inputs c = in;
        c.world_size = W;
        c.coarse_threshold = int64_t(q * level);
        for (size_t b = 0; b < nb; ++b) {
          // In double first, capped before the conversion (fixed / per can be large).
          const double need = std::ceil(double(c.fixed[b]) / (f * double(c.per[b])));
          c.min_new[b] = need >= double(c.mem_cap[b]) ? c.mem_cap[b] : std::max<int64_t>(1, int64_t(need));
        }
        cands.push_back(std::move(c));
      }
    }
    // Whole batches: of the dual constraint's sizes, and of the memory budget's (a bucket
    // loader's B = M_mem / S: the fewest fixed costs; dealing, not M_comp, balances them).
    for (int sizes = 0; sizes < 2 && n_samples <= kSearchSamples; ++sizes) {
      Inputs c = in;
      c.whole = true;
      if (sizes == 1) {
        c.mem_cap = equal_tokens_batch_sizes(pr);
        if (c.mem_cap == in.mem_cap) break;
      }
      std::stable_sort(c.order.begin(), c.order.end(), [&](size_t x, size_t y) {
        return c.fixed[x] + c.mem_cap[x] * c.per[x] > c.fixed[y] + c.mem_cap[y] * c.per[y];
      });
      cands.push_back(std::move(c));
    }
    {
      // Images first, cut evenly over the bins, then the clips LPT onto them: a like mix in
      // every step by construction (when there are images for every bin).
      Inputs c = in;
      c.world_size = W;
      c.images_first = true;
      std::stable_partition(c.order.begin(), c.order.end(), [&](size_t b) { return c.image[b] != 0; });
      uint64_t images = 0;
      for (size_t b : c.order)
        if (c.image[b]) images += pool.begin[b + 1] - pool.begin[b];
      if (images >= bins && images < n_samples && n_samples <= kSearchSamples) cands.push_back(std::move(c));
    }
    if (n_samples <= kSearchSamples) {
      // The cut's total load counts the fixed cost of every micro-batch, which only a cut
      // knows (one per bucket a bin spans): refined from two trial cuts, so the last bin
      // does not collect the estimate's error.
      Inputs c = in;
      c.contiguous = true;
      for (int it = 0; it < 2; ++it) {
        const Counts trial = deal_contiguous(bins, c, nullptr);
        double total = 0;
        for (int64_t x : trial.load) total += double(x);
        c.contiguous_total = total;
      }
      cands.push_back(std::move(c));
    }
    // Every rank-step gets work (K <= n / W, so there is a sample for every bin): a
    // candidate that leaves a bin empty is not kept. If none of the candidates above is full,
    // plain LPT (new micro-batches of one sample or more, one phase) is: it gives every bin a
    // sample before any bin a second one.
    // (Fewer samples than ranks: one step, whose empty bins repeat a sample, as in free mode.)
    const bool can_fill = n_samples >= bins;
    // The global batch and the step mix (PlanProblem::hold): a layout whose steps' tokens
    // (samples for samples:N) stray over kMaxBatchDev from their mean misses the global batch;
    // one with more than kMaxUnmixed of its steps lacking images (or clips) that the pool has
    // enough of misses the mix. The fastest layout that keeps what is held is kept: both,
    // else the batch, else the mix, else the fastest of all. Each dealing is laid out twice: long
    // bins grouped into steps of their own (fewest waits on them) and every bin in one snake
    // (the evenest steps).
    struct Pick {
      std::shared_ptr<Counts> counts;
      std::vector<uint32_t> perm;
      const Inputs* inputs = nullptr;
      int64_t ticks = INT64_MAX;
    };
    Pick fastest, batch_ok, mix_ok, both_ok;
    auto evaluate = [&](const Inputs& c) {
      auto counts = std::make_shared<Counts>(c.contiguous ? deal_contiguous(bins, c, nullptr) : deal(bins, c, nullptr));
      if (can_fill && std::find(counts->samples.begin(), counts->samples.end(), 0u) != counts->samples.end()) return;
      for (const bool group_tall : {true, false}) {
        std::vector<uint32_t> p = stratified_bins(*counts, W, by_tokens, group_tall, rng);
        const int64_t ticks = epoch_ticks(*counts, p, W, allreduce);
        const StepSpread sp = step_spread(*counts, p, W, by_tokens);
        const bool batch = sp.batch_dev <= kMaxBatchDev, mixed = sp.unmixed <= kMaxUnmixed;
        auto keep = [&](Pick& k) { k.counts = counts, k.perm = p, k.inputs = &c, k.ticks = ticks; };
        if (ticks < fastest.ticks) keep(fastest);
        if (batch && ticks < batch_ok.ticks) keep(batch_ok);
        if (mixed && ticks < mix_ok.ticks) keep(mix_ok);
        if (batch && mixed && ticks < both_ok.ticks) keep(both_ok);
      }
    };
    auto choose = [&] {
      const bool hb = pr.hold & kHoldBatch, hm = pr.hold & kHoldMix;
      const Pick* k = hb && hm && both_ok.counts ? &both_ok
                      : hb && batch_ok.counts    ? &batch_ok
                      : hm && mix_ok.counts      ? &mix_ok
                                                 : &fastest;
      if (!k->counts) return;
      // Moved, not copied: the picks are not read again (a deal's log is 8 bytes a piece).
      best = std::move(*k->counts), perm = std::move(k->perm), chosen = *k->inputs, best_ticks = k->ticks;
    };
    for (const Inputs& c : cands) evaluate(c);
    Inputs plain = in;
    if (!fastest.counts) {
      plain.world_size = W;
      std::fill(plain.min_new.begin(), plain.min_new.end(), int64_t(1));
      evaluate(plain);
    }
    choose();
    if (perm.empty()) throw std::logic_error("balanced: plain LPT left a rank-step empty");
  }
  const uint64_t bins = perm.size();
  const uint64_t steps = bins / uint64_t(W);

  // Lay the bins out in (step, rank) order, then deal again writing in place.
  Writer w;
  w.plan = &plan;
  w.next_sample.resize(bins);
  w.next_mb.resize(bins);
  uint64_t total_mbs = 0;
  plan.rank_begin.reserve(bins + 1);
  uint64_t total_samples = 0;
  for (uint64_t i = 0; i < bins; ++i) {
    const uint32_t j = perm[i];
    w.next_sample[j] = total_samples;
    w.next_mb[j] = total_mbs;
    total_samples += best.samples[j];
    total_mbs += best.mbs[j] + (best.samples[j] == 0 ? 1 : 0);  // an empty bin gets a padded one
    plan.rank_begin.push_back(total_mbs);
  }
  plan.sample_ids.reserve(total_samples + uint64_t(W));
  plan.sample_ids.resize(total_samples);
  plan.micro_batches.resize(total_mbs);
  if (chosen.contiguous) {
    deal_contiguous(bins, chosen, &w);
  } else if (best.logged) {
    replay(best, chosen, w);
    std::vector<uint64_t>().swap(best.log);
  } else {
    deal(bins, chosen, &w);
  }

  // Fewer samples than ranks (tiny pool): empty bins repeat the epoch's cheapest sample.
  for (uint64_t i = 0; i < bins; ++i) {
    const uint32_t j = perm[i];
    if (best.samples[j] != 0) continue;
    const SlotItem pad = padded_repeat(pool, cheapest_bucket(pool, in.per));
    MicroBatch& mb = plan.micro_batches[plan.rank_begin[i]];
    mb.begin = uint32_t(plan.sample_ids.size());
    mb.count = pad.count;
    mb.bucket = pad.bucket;
    mb.padded = pad.padded;
    plan.sample_ids.push_back(pool.ids[pad.begin]);
    plan.padded_samples += pad.count;
  }
  plan.steps.resize(steps);
  for (uint64_t t = 0; t < steps; ++t) {
    StepInfo& info = plan.steps[t];
    for (uint64_t m = plan.rank_begin[t * uint64_t(W)]; m < plan.rank_begin[(t + 1) * uint64_t(W)]; ++m) {
      const MicroBatch& mb = plan.micro_batches[m];
      add_to_step(info, mb.count, tokens[mb.bucket], mb.padded);
    }
  }
  if (plan.padded_samples > 0 && pr.end_policy == EndPolicy::kDrop) {
    // The only step could not give every rank work: drop it.
    Plan dropped;
    dropped.strategy = plan.strategy;
    dropped.world_size = W;
    for (const MicroBatch& mb : plan.micro_batches)
      if (!mb.padded) dropped.dropped.insert(dropped.dropped.end(), plan.ids(mb), plan.ids(mb) + mb.count);
    return dropped;
  }
  return plan;
}

// balanced in micro sync mode (FSDP, ZeRO-2/3): the ranks meet at every micro-batch, so a
// step is m "slots" of W micro-batches (one per rank) and each slot takes as long as its
// slowest micro-batch plus its exposed collectives. Micro-batches are cut per bucket at a
// size chosen for a target cost tau (the most samples whose micro-batch costs at most tau,
// within the dual-constraint cap; a sample costlier than tau alone is its own micro-batch);
// all micro-batches are sorted by cost and cut W at a time into slots, which minimises the
// sum of the slot maxima for that set (every slot holds W of nearly equal cost). The count is
// made a multiple of W by splitting the costliest micro-batches in two (else the last slot is
// padded or dropped). tau is searched over the buckets' natural levels and a geometric grid
// for the shortest epoch, computed from per-bucket counts (no pass over the samples); the
// dual-constraint sizes themselves are one candidate. Slots are then grouped into the global
// batch's steps (steps_of_slots): each step's ranks run the same number of micro-batches.
Plan plan_balanced_micro(const PlanProblem& pr) {
  const int W = pr.world_size;
  const uint64_t w = uint64_t(W);
  const size_t nb = pr.buckets->size();
  const BucketedPool pool = shuffled_by_bucket(pr);
  const uint64_t n_samples = pool.ids.size();
  if (n_samples == 0) {
    Plan plan;
    plan.strategy = "balanced";
    plan.world_size = W;
    plan.sync = SyncMode::kMicro;
    return plan;
  }
  if (n_samples > UINT32_MAX) throw ConfigError("balanced: more than 2^32 samples in one epoch");
  const std::vector<int64_t> cap = dual_batch_sizes(pr);
  std::vector<int64_t> per(nb), fixed(nb);
  std::vector<uint64_t> count(nb);
  std::vector<size_t> live;
  for (size_t b = 0; b < nb; ++b) {
    const Bucket& bk = (*pr.buckets)[b];
    per[b] = to_ticks(pr.cost->marginal_time(1, bk));
    fixed[b] = std::max<int64_t>(0, to_ticks(pr.cost->microbatch_time(1, bk)) - per[b]);
    count[b] = pool.begin[b + 1] - pool.begin[b];
    if (count[b]) live.push_back(b);
  }
  // A group: `mult` micro-batches of `n` samples of bucket b.
  struct Group {
    int64_t cost;
    uint16_t b;
    uint32_t n;
    uint64_t mult;
  };
  auto cost_of = [&](size_t b, int64_t n) { return fixed[b] + n * per[b]; };
  auto exposed = [&](int64_t c) {
    const double e = pr.layout.exposed_slot_comm(double(c) * 1e-9);
    return e > 0 ? to_ticks(e) : int64_t(0);
  };
  // The groups of batch sizes B (per bucket), their count made a multiple of W by splits.
  auto groups_of = [&](const std::vector<int64_t>& B, uint64_t& pad) {
    std::vector<Group> g;
    uint64_t mbs = 0;
    for (size_t b : live) {
      const uint64_t q = count[b] / uint64_t(B[b]), r = count[b] % uint64_t(B[b]);
      if (q) g.push_back({cost_of(b, B[b]), uint16_t(b), uint32_t(B[b]), q});
      if (r) g.push_back({cost_of(b, int64_t(r)), uint16_t(b), uint32_t(r), 1});
      mbs += q + (r ? 1 : 0);
    }
    uint64_t extra = (w - mbs % w) % w;
    while (extra > 0) {
      // Split one micro-batch of the costliest group with at least two samples.
      size_t best = g.size();
      for (size_t i = 0; i < g.size(); ++i)
        if (g[i].n >= 2 && (best == g.size() || g[i].cost > g[best].cost)) best = i;
      if (best == g.size()) break;
      const Group x = g[best];
      const uint64_t take = std::min<uint64_t>(x.mult, extra);
      g[best].mult -= take;
      const uint32_t hi = (x.n + 1) / 2, lo = x.n / 2;
      if (hi == lo) {
        g.push_back({cost_of(x.b, hi), x.b, hi, 2 * take});
      } else {
        g.push_back({cost_of(x.b, hi), x.b, hi, take});
        g.push_back({cost_of(x.b, lo), x.b, lo, take});
      }
      extra -= take;
      g.erase(std::remove_if(g.begin(), g.end(), [](const Group& y) { return y.mult == 0; }), g.end());
    }
    pad = extra;
    std::stable_sort(g.begin(), g.end(), [](const Group& x, const Group& y) {
      return x.cost != y.cost ? x.cost > y.cost : x.b < y.b;
    });
    return g;
  };
  // Epoch ticks: every W-th micro-batch in cost order leads a slot.
  auto epoch_of = [&](const std::vector<Group>& g) {
    int64_t total = 0;
    uint64_t pos = 0;
    for (const Group& x : g) {
      const uint64_t first = (pos + w - 1) / w, last = (pos + x.mult + w - 1) / w;  // slots led
      total += int64_t(last - first) * (x.cost + exposed(x.cost));
      pos += x.mult;
    }
    return total;
  };
  std::vector<int64_t> taus;
  int64_t lo_t = INT64_MAX, hi_t = 0;
  for (size_t b : live) {
    const int64_t full = cost_of(b, std::min<int64_t>(cap[b], int64_t(count[b])));
    taus.push_back(full);
    lo_t = std::min(lo_t, cost_of(b, 1));
    hi_t = std::max(hi_t, full);
  }
  constexpr int kGrid = 24;
  for (int i = 0; i < kGrid && hi_t > lo_t; ++i)
    taus.push_back(int64_t(double(lo_t) * std::pow(double(hi_t) / double(lo_t), double(i) / (kGrid - 1))));
  std::sort(taus.begin(), taus.end());
  taus.erase(std::unique(taus.begin(), taus.end()), taus.end());
  // Candidates are ranked by: slots short of the global batch's step count (each step needs
  // one slot or more), then padded slots, then the epoch time.
  const uint64_t target = pr.target_steps();
  struct Rank {
    uint64_t shortfall, pad;
    int64_t ticks;
    bool operator<(const Rank& o) const {
      return shortfall != o.shortfall ? shortfall < o.shortfall : pad != o.pad ? pad < o.pad : ticks < o.ticks;
    }
  };
  auto rank_of = [&](const std::vector<Group>& g, uint64_t pad) {
    uint64_t mbs = pad;
    for (const Group& x : g) mbs += x.mult;
    const uint64_t slots = (mbs + w - 1) / w;
    return Rank{target > slots ? target - slots : 0, pad, epoch_of(g)};
  };
  uint64_t best_pad = 0;
  std::vector<Group> best_g = groups_of(cap, best_pad);
  Rank best = rank_of(best_g, best_pad);
  auto consider = [&](const std::vector<int64_t>& B) {
    uint64_t pad = 0;
    std::vector<Group> g = groups_of(B, pad);
    const Rank r = rank_of(g, pad);
    if (r < best) best = r, best_g = std::move(g), best_pad = pad;
  };
  {
    // The memory budget's sizes (a bucket loader's B = M_mem / S): the fewest fixed costs.
    consider(equal_tokens_batch_sizes(pr));
  }
  for (int64_t tau : taus) {
    std::vector<int64_t> B(nb, 1);
    for (size_t b : live)
      B[b] = std::max<int64_t>(1, std::min<int64_t>(cap[b], tau >= fixed[b] + per[b] ? (tau - fixed[b]) / per[b] : 1));
    consider(B);
  }
  if (best.shortfall > 0) {
    // Too few slots for the step count: scale the sizes down until there are enough (at
    // worst one sample per micro-batch).
    std::vector<int64_t> B = cap;
    for (int pass = 0; pass < 64 && best.shortfall > 0; ++pass) {
      bool shrunk = false;
      for (size_t b : live)
        if (B[b] > 1) B[b] = std::max<int64_t>(1, B[b] * 3 / 4), shrunk = true;
      if (!shrunk) break;
      consider(B);
    }
  }

  // Expand the groups into micro-batches over each bucket's shuffled ids, in cost order.
  std::vector<SlotItem> items;
  std::vector<uint64_t> next(pool.begin.begin(), pool.begin.end() - 1);
  for (const Group& x : best_g)
    for (uint64_t k = 0; k < x.mult; ++k) {
      items.push_back({next[x.b], x.n, x.b, 0});
      next[x.b] += x.n;
    }
  std::vector<uint32_t> dropped;
  bool padded_last = false;
  if (items.size() % w != 0) {
    const uint64_t rem = items.size() % w;
    padded_last = pr.end_policy == EndPolicy::kPad;
    if (pr.end_policy == EndPolicy::kPad) {
      // Complete the last slot with repeats of a sample of the cheapest micro-batch's bucket.
      std::vector<Ticks> least(nb, kMaxTicks);
      for (const Group& x : best_g) least[x.b] = std::min(least[x.b], x.cost);
      const SlotItem pad = padded_repeat(pool, cheapest_bucket(pool, least));
      for (uint64_t r = rem; r < w; ++r) items.push_back(pad);
    } else {
      for (uint64_t i = items.size() - rem; i < items.size(); ++i)
        for (uint32_t k = 0; k < items[i].count; ++k) dropped.push_back(pool.ids[items[i].begin + k]);
      items.resize(items.size() - rem);
    }
  }
  const uint64_t slots = items.size() / w;
  // Ranks of each slot in a seeded order, so no rank always draws the longest.
  Rng rng = problem_rng(pr, kPurposeSlotRanks);
  for (uint64_t s = 0; s < slots; ++s) rng.shuffle(items.data() + s * w, w);
  const SlotSteps steps = steps_of_slots(pr, slot_keys(pr, items, w), target, kPurposeStepOrder, padded_last);
  Plan plan = plan_from_slots(pr, "balanced", pool.ids, items, steps);
  plan.dropped = std::move(dropped);
  return plan;
}

}  // namespace adaptiveload
