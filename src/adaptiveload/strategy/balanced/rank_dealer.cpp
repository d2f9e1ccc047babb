// rank_dealing::Dealer (rank_dealer.h): the bodies of its methods.
#include "adaptiveload/strategy/balanced/rank_dealer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>
#include <vector>

namespace adaptiveload {
namespace rank_dealing {

double Dealer::added(size_t r, const Mb* mb, const Sample& s) const {
  const Bucket& bk = (*pr_.buckets)[s.bucket];
  if (!mb) return pr_.cost->cost(MicroShape::uniform(1, bk));
  if (!pr_.packing) {
    if (mb->bucket != s.bucket || int64_t(mb->ids.size()) >= caps_.batch[r][s.bucket]) return -1;
    return pr_.cost->microbatch_time(int64_t(mb->ids.size()) + 1, bk) - mb->cost;
  }
  if (double(mb->tokens + bk.tokens) > caps_.pack_tokens[r]) return -1;
  MicroShape next = mb->shape;
  next.add(bk);
  if (pr_.memory.bytes(next) > caps_.usable[r]) return -1;
  return pr_.cost->cost(next) - mb->cost;
}

void Dealer::put(Mb& mb, const Sample& s) const {
  const Bucket& bk = (*pr_.buckets)[s.bucket];
  if (mb.ids.empty()) mb.bucket = s.bucket;
  if (mb.bucket != s.bucket) mb.bucket = kPackedBucket;
  mb.ids.push_back(s.id);
  mb.shape.add(bk);
  mb.tokens += bk.tokens;
  mb.cost = pr_.cost->cost(mb.shape);
}

Sample Dealer::sample(uint32_t id) const {
  const uint16_t b = (*pr_.sample_bucket)[id];
  return {pr_.cost->sample_time((*pr_.buckets)[b]), b, id};
}

Mb Dealer::copy_of(uint64_t m) const {
  const MicroBatch& src = plan_.micro_batches[m];
  Mb mb;
  mb.padded = src.padded;
  for (uint32_t k = 0; k < src.count; ++k) put(mb, sample(plan_.ids(src)[k]));
  if (src.bucket != kPackedBucket) mb.bucket = src.bucket;
  return mb;
}

void Dealer::sort_longest_first(std::vector<Sample>& v) {
  std::stable_sort(v.begin(), v.end(), [](const Sample& a, const Sample& b) {
    return a.per != b.per ? a.per > b.per : a.bucket < b.bucket;
  });
}

std::vector<std::vector<Mb>> Dealer::step(size_t t) const {
  const size_t W = size_t(plan_.world_size);
  std::vector<std::vector<Mb>> out(W);
  std::vector<double> load(W, 0.0);
  std::vector<Sample> samples;
  for (size_t r = 0; r < W; ++r) {
    const auto [b, e] = plan_.rank_range(t, int(r));
    for (uint64_t m = b; m < e; ++m) {
      const MicroBatch& mb = plan_.micro_batches[m];
      if (mb.padded) {
        out[r].push_back(copy_of(m));
        load[r] += out[r].back().cost;
        continue;
      }
      for (uint32_t k = 0; k < mb.count; ++k) samples.push_back(sample(plan_.ids(mb)[k]));
    }
  }
  deal_soonest(samples, out, load);
  return out;
}

void Dealer::deal_soonest(std::vector<Sample>& samples, std::vector<std::vector<Mb>>& out,
                          std::vector<double>& load) const {
  const size_t W = out.size();
  sort_longest_first(samples);
  for (const Sample& s : samples) {
    size_t best = W;
    bool merge = false;
    double finish = 0;
    for (size_t r = 0; r < W; ++r) {
      Mb* open = out[r].empty() || out[r].back().padded || out[r].back().group > 1 ? nullptr
                                                                                   : &out[r].back();
      double x = open ? added(r, open, s) : -1;
      const bool m = x >= 0;
      if (!m) x = added(r, nullptr, s);
      const double f = (load[r] + x) / pr_.layout.speed(r);
      if (best == W || f < finish) best = r, finish = f, merge = m;
    }
    if (!merge) out[best].emplace_back();
    const double before = out[best].back().cost;
    put(out[best].back(), s);
    load[best] += out[best].back().cost - before;
  }
}

std::vector<Mb> Dealer::slot(size_t t, uint64_t i) const {
  const size_t W = size_t(plan_.world_size);
  std::vector<Mb> in(W);
  bool padded = false;
  for (size_t r = 0; r < W; ++r) {
    in[r] = copy_of(plan_.rank_range(t, int(r)).first + i);
    padded |= in[r].padded != 0;
  }
  if (padded) return in;  // a padded repeat keeps its slot as planned
  std::vector<size_t> ranks(W);
  std::iota(ranks.begin(), ranks.end(), size_t(0));
  std::vector<Mb> out(W);
  if (!share_slot(in, ranks, out)) return in;  // no rank has room: as planned
  return out;
}

bool Dealer::share_slot(const std::vector<Mb>& in, std::vector<size_t> ranks,
                        std::vector<Mb>& out) const {
  // Fastest rank first; the longest micro-batch to it. The samples are read in the ranks'
  // order as given (a plan of an earlier layout release deals them so).
  const std::vector<size_t> order = ranks;
  std::vector<size_t> mbs = ranks;
  std::stable_sort(ranks.begin(), ranks.end(),
                   [&](size_t a, size_t b) { return pr_.layout.speed(a) > pr_.layout.speed(b); });
  std::stable_sort(mbs.begin(), mbs.end(),
                   [&](size_t a, size_t b) { return in[a].cost > in[b].cost; });
  if (pr_.packing) {
    std::vector<Sample> samples;
    for (size_t r : order)
      for (uint32_t id : in[r].ids) samples.push_back(sample(id));
    return share(samples, ranks, out);
  }
  // Bucketed: each rank keeps a bucket (the longest micro-batch's to the fastest rank), and
  // each bucket's samples are shared among the ranks that hold it.
  std::vector<uint16_t> bucket_of(out.size());
  for (size_t k = 0; k < ranks.size(); ++k) bucket_of[ranks[k]] = in[mbs[k]].bucket;
  std::vector<uint16_t> done;
  for (size_t k = 0; k < mbs.size(); ++k) {
    const uint16_t b = in[mbs[k]].bucket;
    if (std::find(done.begin(), done.end(), b) != done.end()) continue;
    done.push_back(b);
    std::vector<Sample> samples;
    for (size_t r : order)
      if (in[r].bucket == b)
        for (uint32_t id : in[r].ids) samples.push_back(sample(id));
    std::vector<size_t> holders;
    for (size_t r : ranks)
      if (bucket_of[r] == b) holders.push_back(r);
    if (!share(samples, holders, out)) return false;
  }
  return true;
}

std::vector<std::vector<Mb>> Dealer::epoch() const {
  const size_t W = size_t(plan_.world_size), K = plan_.num_steps();
  std::vector<std::vector<Mb>> out(K * W);
  std::vector<double> load(K * W, 0.0);
  std::vector<Sample> samples;
  for (size_t j = 0; j < K * W; ++j)
    for (uint64_t m = plan_.rank_begin[j]; m < plan_.rank_begin[j + 1]; ++m) {
      const MicroBatch& mb = plan_.micro_batches[m];
      if (mb.padded) {
        out[j].push_back(copy_of(m));
        load[j] += out[j].back().cost;
      } else {
        for (uint32_t k = 0; k < mb.count; ++k) samples.push_back(sample(plan_.ids(mb)[k]));
      }
    }
  sort_longest_first(samples);
  // One heap of rank-steps (least load first, then lowest index) per speed.
  std::vector<double> speeds;
  for (size_t r = 0; r < W; ++r)
    if (std::find(speeds.begin(), speeds.end(), pr_.layout.speed(r)) == speeds.end())
      speeds.push_back(pr_.layout.speed(r));
  using Entry = std::pair<double, size_t>;
  std::vector<std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>>> heaps(
      speeds.size());
  for (size_t j = 0; j < K * W; ++j)
    heaps[size_t(std::find(speeds.begin(), speeds.end(), pr_.layout.speed(j % W)) - speeds.begin())]
        .push({load[j], j});
  for (const Sample& s : samples) {
    size_t best = SIZE_MAX, cls = 0;
    bool merge = false;
    double finish = 0;
    for (size_t c = 0; c < heaps.size(); ++c) {
      const size_t j = heaps[c].top().second;
      Mb* open = out[j].empty() || out[j].back().padded ? nullptr : &out[j].back();
      double x = open ? added(j % W, open, s) : -1;
      const bool m = x >= 0;
      if (!m) x = added(j % W, nullptr, s);
      const double f = (load[j] + x) / speeds[c];
      if (best == SIZE_MAX || f < finish) best = j, cls = c, finish = f, merge = m;
    }
    heaps[cls].pop();
    if (!merge) out[best].emplace_back();
    const double before = out[best].back().cost;
    put(out[best].back(), s);
    load[best] += out[best].back().cost - before;
    heaps[cls].push({load[best], best});
  }
  return out;
}

bool Dealer::share(std::vector<Sample>& samples, const std::vector<size_t>& ranks,
                   std::vector<Mb>& out) const {
  sort_longest_first(samples);
  for (const Sample& s : samples) {
    size_t best = SIZE_MAX;
    double finish = 0;
    for (size_t r : ranks) {
      const double x = added(r, out[r].ids.empty() ? nullptr : &out[r], s);
      if (x < 0) continue;
      const double f = (out[r].cost + x) / pr_.layout.speed(r);
      if (best == SIZE_MAX || f < finish) best = r, finish = f;
    }
    if (best == SIZE_MAX) return false;  // no rank has room for it
    put(out[best], s);
  }
  // A rank left without a sample takes the last (shortest) of the rank with the most.
  for (size_t r : ranks) {
    if (!out[r].ids.empty()) continue;
    size_t donor = r;
    for (size_t q : ranks)
      if (out[q].ids.size() > out[donor].ids.size()) donor = q;
    if (out[donor].ids.size() < 2) return false;
    const uint32_t id = out[donor].ids.back();
    Mb rest;
    for (size_t k = 0; k + 1 < out[donor].ids.size(); ++k) put(rest, sample(out[donor].ids[k]));
    out[donor] = std::move(rest);
    put(out[r], sample(id));
  }
  return true;
}

std::vector<std::vector<Mb>> Dealer::reslot(size_t t) const {
  const size_t W = size_t(plan_.world_size);
  std::vector<Sample> samples;
  double work = 0, tokens = 0;
  for (size_t r = 0; r < W; ++r) {
    const auto [b, e] = plan_.rank_range(t, int(r));
    for (uint64_t m = b; m < e; ++m) {
      const MicroBatch& mb = plan_.micro_batches[m];
      if (mb.padded) return {};
      for (uint32_t k = 0; k < mb.count; ++k) {
        samples.push_back(sample(plan_.ids(mb)[k]));
        work += samples.back().per, tokens += double((*pr_.buckets)[samples.back().bucket].tokens);
      }
    }
  }
  return form_slots(samples, work, tokens, 1);
}

size_t Dealer::slot_count(double work, double tokens, size_t least) const {
  double t_max = 1e300;
  for (size_t r = 0; r < size_t(plan_.world_size); ++r)
    t_max = std::min(t_max, caps_.pack_tokens[r] * work / tokens / pr_.layout.speed(r));
  return std::max(least, size_t(std::max(1.0, std::ceil(work / (t_max * speeds_)))));
}

std::vector<std::vector<Mb>> Dealer::form_slots(std::vector<Sample> samples, double work,
                                                double tokens, size_t least, bool ration,
                                                size_t lumped) const {
  const size_t W = size_t(plan_.world_size);
  sort_longest_first(samples);
  size_t slots = slot_count(work, tokens, least);
  if (!ration) return slots_of(samples, work, slots, false, lumped);
  // Rationed, the count from the work is short where the longest samples fit one a micro-batch
  // and only the fast ranks take them (a slot then holds as many as there are fast ranks): while
  // no slots can be formed, a quarter more are tried; then counts between the last two tried,
  // the fastest kept.
  std::vector<std::vector<Mb>> best;
  double seconds = 0;
  size_t lo = slots, hi = 0;
  auto attempt = [&](size_t n) {
    std::vector<std::vector<Mb>> out = slots_of(samples, work, n, true, lumped);
    if (out.empty()) return false;
    const double x = micro_seconds(out);
    if (best.empty() || x < seconds) best = std::move(out), seconds = x;
    return true;
  };
  for (int tries = 0; tries <= 12 && hi == 0 && (tries == 0 || slots * W <= samples.size());
       ++tries) {
    if (attempt(slots))
      hi = slots;
    else
      lo = slots, slots += std::max<size_t>(1, slots / 4);
  }
  for (int k = 0; k < 3 && hi > lo + 1; ++k) {  // bisect towards the fewest slots that form
    const size_t mid = (lo + hi) / 2;
    if (attempt(mid))
      hi = mid;
    else
      lo = mid;
  }
  return best;
}

std::vector<std::vector<Mb>> Dealer::slots_of(const std::vector<Sample>& samples, double work,
                                              size_t slots, bool ration, size_t lumped) const {
  const size_t W = size_t(plan_.world_size);
  double work_left = work;  // each slot's T: the work left over the slots left
  std::vector<size_t> ranks(W);
  std::iota(ranks.begin(), ranks.end(), size_t(0));
  std::stable_sort(ranks.begin(), ranks.end(),
                   [&](size_t a, size_t b) { return pr_.layout.speed(a) > pr_.layout.speed(b); });
  double slow_speeds = 0;  // of the ranks slower than the fastest, and their count
  size_t slow_ranks = 0;
  for (size_t r : ranks)
    if (pr_.layout.speed(r) < pr_.layout.speed(ranks[0]))
      slow_speeds += pr_.layout.speed(r), ++slow_ranks;
  // Runs of one bucket (longest first) and the next unused sample of each.
  std::vector<size_t> run_begin, cursor;
  for (size_t k = 0; k < samples.size(); ++k)
    if (k == 0 || samples[k].bucket != samples[k - 1].bucket) run_begin.push_back(k);
  cursor = run_begin;
  run_begin.push_back(samples.size());
  std::vector<std::vector<Mb>> out(W);
  size_t left = samples.size();
  double room = 0;  // tokens one slot holds at most
  for (size_t r = 0; r < W; ++r) room += caps_.pack_tokens[r];
  for (size_t i = 0;; ++i) {
    if (i + 1 >= slots) {
      // The last slot takes the rest where it can (else one more slot, filled to memory).
      std::vector<Sample> rest;
      double rest_tokens = 0;
      for (size_t u = 0; u + 1 < run_begin.size(); ++u)
        for (size_t k = cursor[u]; k < run_begin[u + 1]; ++k)
          rest.push_back(samples[k]),
              rest_tokens += double((*pr_.buckets)[samples[k].bucket].tokens);
      if (rest.size() < W) return {};
      std::vector<Mb> last(W);
      if (rest_tokens <= room && share(rest, ranks, last)) {
        for (size_t r = 0; r < W; ++r) out[r].push_back(std::move(last[r]));
        return out;
      }
      if (ration) return {};  // form_slots tries more slots
      if (left < 2 * W) {
        // Too few for two slots: one sample a rank in the last, the others where they fit
        // in a slot already formed, at the least time they add.
        for (size_t k = 0; k < W; ++k) put(out[ranks[k]].emplace_back(), rest[k]);
        for (size_t k = W; k < rest.size(); ++k)
          if (!place_anywhere(out, rest[k])) return {};
        return out;
      }
    }
    if (left < 2 * W) return {};  // this slot and the last need a sample a rank
    double T = i + 1 >= slots ? 1e300 : work_left / (double(slots - i) * speeds_);
    if (i < lumped && i + 1 < slots)
      T = std::max(T, lumped_slot(samples, run_begin, cursor, ranks));
    double slot_end = T;  // the slot's time so far (its fastest ranks' micro-batches)
    for (size_t pos = 0; pos < W; ++pos) {
      const size_t r = ranks[pos];
      // Samples kept back: one for each rank after this one, and one a rank for the last slot.
      const size_t keep = W + (W - 1 - pos);
      Mb mb;
      const double v = pr_.layout.speed(r);
      const bool fastest = v == pr_.layout.speed(ranks[0]);
      double budget = v * T;
      size_t most = SIZE_MAX;  // samples it takes at most
      if (ration && !fastest) {
        // A slower rank takes no more than its share of the work it can take within the slot
        // (the samples it ends within the slot's time): the longest samples wait for the fast
        // ranks, and what it can take is kept for every slot left.
        double can = 0, count = 0;
        for (size_t u = 0; u + 1 < run_begin.size(); ++u)
          if (samples[run_begin[u]].per <= v * slot_end) {
            can += double(run_begin[u + 1] - cursor[u]) * samples[run_begin[u]].per;
            count += double(run_begin[u + 1] - cursor[u]);
          }
        budget = std::min(v * slot_end, v * can / (double(slots - i) * slow_speeds));
        most = size_t(std::max(1.0, std::ceil(count / (double(slots - i) * double(slow_ranks)))));
      }
      for (size_t u = 0; u + 1 < run_begin.size() && left > keep; ++u) {
        size_t& k = cursor[u];
        while (k < run_begin[u + 1] && left > keep) {
          const double x = added(r, mb.ids.empty() ? nullptr : &mb, samples[k]);
          // A long sample waits for a faster rank; the fastest take it.
          if (x < 0 || (mb.cost + x > budget && (!mb.ids.empty() || !fastest)) ||
              mb.ids.size() >= most)
            break;
          put(mb, samples[k]), work_left -= samples[k].per, ++k, --left;
        }
      }
      for (size_t u = run_begin.size() - 1; u-- > 0 && mb.ids.empty() && left > keep;)
        if (cursor[u] < run_begin[u + 1]) {  // none fits: the shortest left
          put(mb, samples[cursor[u]]), work_left -= samples[cursor[u]].per, ++cursor[u], --left;
        }
      if (mb.ids.empty()) return {};
      slot_end = std::max(slot_end, mb.cost / v);
      out[r].push_back(std::move(mb));
    }
  }
}

double Dealer::lumped_slot(const std::vector<Sample>& samples, const std::vector<size_t>& run_begin,
                           const std::vector<size_t>& cursor,
                           const std::vector<size_t>& ranks) const {
  size_t longest = SIZE_MAX;  // the longest sample left (each run's next)
  for (size_t u = 0; u + 1 < run_begin.size(); ++u)
    if (cursor[u] < run_begin[u + 1] &&
        (longest == SIZE_MAX || samples[cursor[u]].per > samples[longest].per))
      longest = cursor[u];
  if (longest == SIZE_MAX) return 0;
  const size_t fast = ranks.front(), slow = ranks.back();
  const double vf = pr_.layout.speed(fast), vs = pr_.layout.speed(slow);
  const Bucket& bk = (*pr_.buckets)[samples[longest].bucket];
  int64_t k = std::max<int64_t>(1, std::llround(vf / vs));  // the fastest's share of them
  k = std::min(k, pr_.packing ? int64_t(caps_.pack_tokens[fast] / double(bk.tokens))
                              : caps_.batch[fast][samples[longest].bucket]);
  const double one = pr_.cost->cost(MicroShape::uniform(1, bk)) / vs,
               many = pr_.cost->cost(MicroShape::uniform(std::max<int64_t>(k, 1), bk)) / vf;
  return std::max(one, many) * (1 + 1e-9);  // both within the slot
}

bool Dealer::place_anywhere(std::vector<std::vector<Mb>>& out, const Sample& s) const {
  size_t best_r = SIZE_MAX, best_i = 0;
  double best = 0;
  for (size_t i = 0; i < out[0].size(); ++i) {
    double slot = 0;
    for (size_t r = 0; r < out.size(); ++r)
      slot = std::max(slot, out[r][i].cost / pr_.layout.speed(r));
    for (size_t r = 0; r < out.size(); ++r) {
      const double x = added(r, &out[r][i], s);
      if (x < 0) continue;
      const double end = std::max(slot, (out[r][i].cost + x) / pr_.layout.speed(r)) - slot;
      if (best_r == SIZE_MAX || end < best) best_r = r, best_i = i, best = end;
    }
  }
  if (best_r == SIZE_MAX) return false;
  put(out[best_r][best_i], s);
  return true;
}

std::vector<std::vector<std::vector<Mb>>> Dealer::epoch_slots() const {
  const size_t W = size_t(plan_.world_size), K = plan_.num_steps();
  std::vector<Sample> samples;
  double work = 0, tokens = 0;
  for (const MicroBatch& mb : plan_.micro_batches) {
    if (mb.padded) return {};
    for (uint32_t k = 0; k < mb.count; ++k) {
      samples.push_back(sample(plan_.ids(mb)[k]));
      work += samples.back().per, tokens += double((*pr_.buckets)[samples.back().bucket].tokens);
    }
  }
  if (K == 0) return {};
  // Candidates: slots formed by the work's share, rationed (form_slots), and rationed with
  // lumped slots where the slowest ranks' share needs long samples (1, 0.75 and 1.25 times the
  // estimated count); the fastest.
  const size_t count = slot_count(work, tokens, K);  // as form_slots starts
  const double lumps =
      pr_.lumped_layouts()
          ? double(count) * lumped_share(samples, work / (double(count) * speeds_), count)
          : 0;
  std::vector<std::vector<Mb>> slots = form_slots(samples, work, tokens, K, false);
  double seconds = slots.empty() ? 0 : micro_seconds(slots);
  std::vector<size_t> tried;
  for (const double m : {0.0, 1.0, 0.75, 1.25}) {
    const size_t n = size_t(std::llround(m * lumps));
    if ((m > 0 && n == 0) || std::find(tried.begin(), tried.end(), n) != tried.end()) continue;
    tried.push_back(n);
    std::vector<std::vector<Mb>> c = form_slots(samples, work, tokens, K, true, n);
    if (c.empty()) continue;
    const double x = micro_seconds(c);
    if (slots.empty() || x < seconds) slots = std::move(c), seconds = x;
  }
  if (slots.empty()) return {};
  std::vector<std::vector<std::vector<Mb>>> steps(K, std::vector<std::vector<Mb>>(W));
  for (size_t i = 0; i < slots[0].size(); ++i)
    for (size_t r = 0; r < W; ++r) steps[snake_step(i, K)][r].push_back(std::move(slots[r][i]));
  return steps;
}

std::vector<std::vector<Mb>> Dealer::trim(std::vector<std::vector<Mb>> out, bool formed) const {
  const size_t W = size_t(plan_.world_size), K = out.size() / W;
  std::vector<Sample> spill;
  for (size_t t = 0; t < K; ++t)
    for (size_t i = 0; i < out[t * W].size(); ++i) give_up(&out[t * W], i, speeds_, spill);
  if (spill.empty()) return {};
  sort_longest_first(spill);
  std::vector<std::vector<Mb>> extra;  // [slot][rank]
  if (formed) {  // the given-up samples' slots formed by speed (rationed: form_slots)
    double work = 0, tokens = 0;
    for (const Sample& s : spill) work += s.per, tokens += double((*pr_.buckets)[s.bucket].tokens);
    const std::vector<std::vector<Mb>> slots = form_slots(spill, work, tokens, 1, true);
    if (slots.empty()) return {};
    extra.assign(slots[0].size(), std::vector<Mb>(W));
    for (size_t r = 0; r < W; ++r)
      for (size_t i = 0; i < slots[r].size(); ++i) extra[i][r] = slots[r][i];
    spill.clear();
  }
  for (const Sample& s : spill) {
    size_t bi = SIZE_MAX, br = 0;
    double best = 0;
    for (size_t i = 0; i < extra.size(); ++i) {
      double end = 0;
      for (size_t r = 0; r < W; ++r) end = std::max(end, extra[i][r].cost / pr_.layout.speed(r));
      for (size_t r = 0; r < W; ++r) {
        const double x = added(r, extra[i][r].ids.empty() ? nullptr : &extra[i][r], s);
        const double e = std::max(end, (extra[i][r].cost + x) / pr_.layout.speed(r)) - end;
        if (x >= 0 && (bi == SIZE_MAX || e < best)) bi = i, br = r, best = e;
      }
    }
    if (bi == SIZE_MAX || best > added(0, nullptr, s)) {
      bi = extra.size(), br = 0;
      extra.emplace_back(W);
      for (size_t r = 1; r < W; ++r)
        if (pr_.layout.speed(r) > pr_.layout.speed(br)) br = r;
    }
    put(extra[bi][br], s);
  }
  std::vector<uint32_t> loose;
  for (size_t i = extra.size(); i-- > 0;) {
    bool full = true;
    for (const Mb& mb : extra[i]) full &= !mb.ids.empty();
    if (full) continue;
    for (const Mb& mb : extra[i]) loose.insert(loose.end(), mb.ids.begin(), mb.ids.end());
    extra.erase(extra.begin() + std::ptrdiff_t(i));
  }
  for (uint32_t id : loose) {
    Mb* to = nullptr;
    double best = 0;
    auto consider = [&](size_t r, Mb& mb) {
      const double x = mb.padded ? -1 : added(r, &mb, sample(id));
      if (x >= 0 && (!to || x / pr_.layout.speed(r) < best))
        to = &mb, best = x / pr_.layout.speed(r);
    };
    for (std::vector<Mb>& slot : extra)
      for (size_t r = 0; r < W; ++r) consider(r, slot[r]);
    for (size_t j = 0; j < out.size(); ++j)
      for (Mb& mb : out[j]) consider(j % W, mb);
    if (!to) return {};
    put(*to, sample(id));
  }
  for (size_t i = 0; i < extra.size(); ++i)
    for (size_t r = 0; r < W; ++r) out[(K - 1 - i % K) * W + r].push_back(std::move(extra[i][r]));
  return out;
}

void Dealer::give_up(std::vector<Mb>* ranks, size_t i, double speeds,
                     std::vector<Sample>& spill) const {
  const size_t W = size_t(plan_.world_size);
  size_t slow = 0;
  double first = -1, second = 0;
  for (size_t r = 0; r < W; ++r) {
    if (ranks[r][i].padded) return;
    const double x = ranks[r][i].cost / pr_.layout.speed(r);
    if (x > first)
      second = std::max(second, first), first = x, slow = r;
    else
      second = std::max(second, x);
  }
  Mb& mb = ranks[slow][i];
  while (mb.ids.size() > 1) {
    const Sample s = sample(mb.ids.back());
    Mb rest;
    for (size_t k = 0; k + 1 < mb.ids.size(); ++k) put(rest, sample(mb.ids[k]));
    const double v = pr_.layout.speed(slow);
    if (mb.cost / v - std::max(second, rest.cost / v) <= s.per / speeds) return;
    mb = std::move(rest), spill.push_back(s);
  }
}

double Dealer::micro_seconds(const std::vector<std::vector<Mb>>& ranks) const {
  double s = 0;
  for (size_t i = 0; i < ranks[0].size(); ++i) {
    double x = 0;
    for (size_t r = 0; r < ranks.size(); ++r)
      x = std::max(x, ranks[r][i].cost / pr_.layout.speed(r));
    s += x + std::max(0.0, pr_.layout.exposed_slot_comm(x));
  }
  return s;
}

}  // namespace rank_dealing
}  // namespace adaptiveload
