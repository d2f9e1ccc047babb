// cuda_emu runtime: fibers, the block scheduler, the checks, and the host API stand-ins.
// See cuda_emu.h for the model and what is checked.
#include "cuda_emu.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "include/cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define AL_EMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AL_EMU_ASAN 1
#endif
#endif
#ifdef AL_EMU_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if !defined(__x86_64__) || defined(CUDA_EMU_UCONTEXT)
#define AL_EMU_UCONTEXT 1
#include <ucontext.h>
#endif

// ---------------------------------------------------------------- context switch

#ifndef AL_EMU_UCONTEXT
// cuda_emu_switch(save, to): pushes the callee-saved registers, stores the stack pointer
// in *save, loads `to` and pops the registers saved there. A new fiber's stack is laid
// out so that the first switch "returns" into cuda_emu_fiber_start with r12 = argument,
// r13 = entry function.
extern "C" void cuda_emu_switch(void** save, void* to);
extern "C" void cuda_emu_fiber_start();
asm(R"(
  .text
  .globl cuda_emu_switch
  .hidden cuda_emu_switch
  .type cuda_emu_switch,@function
cuda_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cuda_emu_switch,.-cuda_emu_switch
  .globl cuda_emu_fiber_start
  .hidden cuda_emu_fiber_start
  .type cuda_emu_fiber_start,@function
cuda_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size cuda_emu_fiber_start,.-cuda_emu_fiber_start
)");
#endif

namespace cuda_emu {
namespace detail {

__thread ThreadCtx* tl_thread = nullptr;
__thread BlockCtx* tl_block = nullptr;

namespace {

constexpr size_t kStaticSmemLimit = 48 * 1024;  // static __shared__ per block
constexpr size_t kDynSmemDefault = 48 * 1024;   // dynamic, without cudaFuncSetAttribute
constexpr size_t kSmemOptin = 227 * 1024;       // per block, opt-in (sm_90)
constexpr size_t kSmemPerSm = 228 * 1024;
constexpr size_t kSmemReservedPerBlock = 1024;  // the runtime's per-block reservation (sm_80+)

// A formatted message in a fixed buffer: messages are built on fibers that never return
// (a failing fiber is abandoned), so they must not own heap memory.
struct Msg {
  char s[1024];
  const char* c_str() const { return s; }
  operator std::string() const { return s; }
};
Msg fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
Msg fmt(const char* f, ...) {
  Msg m;
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(m.s, sizeof m.s, f, ap);
  va_end(ap);
  return m;
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// ---------------------------------------------------------------- options

struct Options {
  Order order = Order::Forward;
  uint64_t seed = 1;
  int threads = 2;
  int sms = 132;
};
std::mutex g_opt_mu;
Options g_opt;
bool g_opt_init = false;

Options options() {
  std::lock_guard<std::mutex> lk(g_opt_mu);
  if (!g_opt_init) {
    g_opt_init = true;
    if (const char* e = std::getenv("CUDA_EMU_ORDER")) {
      std::string s = e;
      const size_t c = s.find(':');
      const std::string name = s.substr(0, c);
      if (c != std::string::npos) g_opt.seed = std::strtoull(s.c_str() + c + 1, nullptr, 10);
      if (name == "forward")
        g_opt.order = Order::Forward;
      else if (name == "reverse")
        g_opt.order = Order::Reverse;
      else if (name == "random")
        g_opt.order = Order::Random;
      else if (name == "lagged")
        g_opt.order = Order::Lagged;
      else
        std::fprintf(stderr,
                     "cuda_emu: unknown CUDA_EMU_ORDER '%s' (forward, reverse, random[:seed], "
                     "lagged[:seed])\n",
                     e);
    }
    if (const char* e = std::getenv("CUDA_EMU_THREADS")) g_opt.threads = std::max(1, std::atoi(e));
    if (const char* e = std::getenv("CUDA_EMU_SMS")) g_opt.sms = std::max(1, std::atoi(e));
  }
  return g_opt;
}

std::atomic<uint64_t> g_launches{0}, g_switches{0};

// ---------------------------------------------------------------- errors (per host thread)

thread_local cudaError_t tl_last_error = cudaSuccess;
thread_local cudaError_t tl_exec_error = cudaSuccess;  // reported by the next synchronising call
thread_local std::string tl_failure;

void set_error(cudaError_t e, const std::string& msg) {
  tl_last_error = e;
  tl_failure = msg;
  std::fprintf(stderr, "cuda_emu: %s\n", msg.c_str());
}

std::mutex g_attr_mu;
std::map<const void*, int> g_max_dyn_smem;  // kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize

// ---------------------------------------------------------------- fibers and blocks

enum class St : uint8_t { Runnable, WaitWarp, WaitBlock, Done, Aborted };

struct Block;

struct Fiber {
  ThreadCtx ctx;
  void* sp = nullptr;
  St st = St::Runnable;
  int linear = 0, warp = 0, lane = 0;
  // pending warp operation
  WarpKind wk = WarpKind::Sync;
  unsigned wmask = 0;
  uint64_t wval = 0, wres = 0;
  int wparam = 0, wwidth = 32;
  const char* wfile = nullptr;
  int wline = 0;
  int bres = 0;  // block barrier result
  char* stack = nullptr;
  size_t stack_size = 0;
  void* fake = nullptr;  // ASan fake stack of this fiber while switched out
  Block* block = nullptr;
#ifdef AL_EMU_UCONTEXT
  ucontext_t uc;
#endif
};

struct Launch {
  LaunchCfg cfg;
  const char* name;
  Body body;
  void* closure;
  const char* file;
  int line;
  Options opt;
  size_t dyn_limit;
  uint64_t nblocks;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  uint64_t fail_block = ~0ull;
  std::string fail_msg;
  std::atomic<uint64_t> switches{0};
};

struct SharedAlloc {
  const char* key;
  void* p;
  size_t bytes;
};

struct Block {
  BlockCtx ctx;
  Launch* L = nullptr;
  Fiber* f = nullptr;
  int n = 0, nwarps = 0;
  std::vector<uint32_t> arrived, done_mask, exist, bar_wait;  // per warp, lane bitmasks
  int bar_arrived = 0, bar_first = -1, bar_line = 0;
  const char* bar_file = nullptr;
  BarKind bar_kind = BarKind::Sync;
  int bar_acc = 0, bar_result = 0;
  int done = 0;
  uint64_t epoch = 0;
  bool failed = false;
  std::string msg;
  std::vector<SharedAlloc> shared;
  size_t static_bytes = 0;
  void* dyn = nullptr;
};

struct Worker {
  std::vector<Fiber> fibers;
  char* stacks = nullptr;
  size_t nstacks = 0, stack_size = 0, slot = 0;
  void* sched_sp = nullptr;
  Fiber* cur = nullptr;
  const void* sched_bottom = nullptr;  // ASan: the worker's own stack
  size_t sched_size = 0;
  void* sched_fake = nullptr;
  bool dirty = false;  // a fiber was abandoned mid-run: its stack may hold ASan poison
  uint64_t switches = 0;
#ifdef AL_EMU_UCONTEXT
  ucontext_t sched_uc;
#endif
  ~Worker() {
    if (stacks) munmap(stacks, nstacks * slot);
  }
};
thread_local Worker tl_worker;

size_t stack_bytes() {
#ifdef AL_EMU_ASAN
  return 256 * 1024;
#else
  return 64 * 1024;
#endif
}

void ensure_stacks(Worker& W, size_t n) {
  if (W.nstacks >= n) return;
  if (W.stacks) munmap(W.stacks, W.nstacks * W.slot);
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  W.stack_size = stack_bytes();
  W.slot = W.stack_size + page;  // a guard page below each stack
  void* m = mmap(nullptr, n * W.slot, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "cuda_emu: cannot map %zu fiber stacks\n", n);
    std::abort();
  }
  W.stacks = static_cast<char*>(m);
  W.nstacks = n;
  for (size_t i = 0; i < n; ++i) mprotect(W.stacks + i * W.slot, page, PROT_NONE);
  W.fibers.resize(n);
  for (size_t i = 0; i < n; ++i) {
    W.fibers[i].stack = W.stacks + i * W.slot + page;
    W.fibers[i].stack_size = W.stack_size;
  }
}

inline void asan_start(void** fake, const void* bottom, size_t size) {
#ifdef AL_EMU_ASAN
  __sanitizer_start_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}
inline void asan_finish(void* fake, const void** bottom, size_t* size) {
#ifdef AL_EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
  (void)fake, (void)bottom, (void)size;
#endif
}

void on_exit(Fiber* f);

void fiber_entry(Fiber* f) {
  Worker& W = tl_worker;
  asan_finish(nullptr, &W.sched_bottom, &W.sched_size);
  f->block->L->body(f->block->L->closure);
  on_exit(f);
  if (f->st != St::Aborted) f->st = St::Done;
  asan_start(nullptr, W.sched_bottom, W.sched_size);
#ifdef AL_EMU_UCONTEXT
  setcontext(&W.sched_uc);
#else
  cuda_emu_switch(&f->sp, W.sched_sp);
#endif
  __builtin_unreachable();
}

#ifdef AL_EMU_UCONTEXT
void fiber_entry_uc(unsigned lo, unsigned hi) {
  fiber_entry(reinterpret_cast<Fiber*>((uintptr_t(hi) << 32) | uintptr_t(lo)));
}
#endif

void init_fiber(Fiber* f) {
#ifdef AL_EMU_UCONTEXT
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack;
  f->uc.uc_stack.ss_size = f->stack_size;
  f->uc.uc_link = nullptr;
  const uintptr_t a = reinterpret_cast<uintptr_t>(f);
  makecontext(&f->uc, reinterpret_cast<void (*)()>(fiber_entry_uc), 2, unsigned(a),
              unsigned(a >> 32));
#else
  // Stack tops staggered by fiber (cache colouring): equally spaced stacks would put every
  // fiber's hot frames in the same few cache sets.
  const uintptr_t colour = uintptr_t(f->linear % 61) * 64 + uintptr_t(f->linear / 61 % 4) * 16;
  uintptr_t top = (reinterpret_cast<uintptr_t>(f->stack) + f->stack_size - colour) & ~uintptr_t(15);
  void** s = reinterpret_cast<void**>(top - 8);  // return slot: after `ret`, rsp = top (16-aligned)
  s[0] = reinterpret_cast<void*>(&cuda_emu_fiber_start);
  s[-1] = nullptr;                                // rbp
  s[-2] = nullptr;                                // rbx
  s[-3] = f;                                      // r12: argument
  s[-4] = reinterpret_cast<void*>(&fiber_entry);  // r13: entry
  s[-5] = nullptr;                                // r14
  s[-6] = nullptr;                                // r15
  f->sp = &s[-6];
#endif
}

void resume(Worker& W, Fiber* f) {
  W.cur = f;
  tl_thread = &f->ctx;
  asan_start(&W.sched_fake, f->stack, f->stack_size);
#ifdef AL_EMU_UCONTEXT
  swapcontext(&W.sched_uc, &f->uc);
#else
  cuda_emu_switch(&W.sched_sp, f->sp);
#endif
  asan_finish(W.sched_fake, nullptr, nullptr);
  ++W.switches;
}

// Called on a fiber: back to the scheduler until resumed.
void yield(Fiber* f) {
  Worker& W = tl_worker;
  asan_start(&f->fake, W.sched_bottom, W.sched_size);
#ifdef AL_EMU_UCONTEXT
  swapcontext(&f->uc, &W.sched_uc);
#else
  cuda_emu_switch(&f->sp, W.sched_sp);
#endif
  asan_finish(f->fake, nullptr, nullptr);
}

Msg thread_name(const Block& B, int linear) {
  const dim3 d = B.ctx.bdim;
  const unsigned x = unsigned(linear) % d.x, y = unsigned(linear) / d.x % d.y,
                 z = unsigned(linear) / (d.x * d.y);
  return fmt("thread (%u,%u,%u) [warp %d lane %d]", x, y, z, linear / 32, linear % 32);
}

// Records the block's first error; the calling fiber never runs again.
[[noreturn]] void fail(Fiber* f, const Msg& msg) {
  Block& B = *f->block;
  if (!B.failed) {
    B.failed = true;
    B.msg = msg.s;
  }
  f->st = St::Aborted;
  tl_worker.dirty = true;
  yield(f);
  std::abort();  // an aborted fiber is never resumed
}

Fiber* current() {
  Fiber* f = tl_worker.cur;
  if (f == nullptr || tl_thread != &f->ctx) {
    std::fprintf(stderr, "cuda_emu: a device function was called outside a kernel launch\n");
    std::abort();
  }
  return f;
}

bool same_site(const char* fa, int la, const char* fb, int lb) {
  return la == lb && (fa == fb || std::strcmp(fa, fb) == 0);
}

const char* warp_kind_name(WarpKind k) {
  switch (k) {
    case WarpKind::ShflIdx:
      return "__shfl_sync";
    case WarpKind::ShflUp:
      return "__shfl_up_sync";
    case WarpKind::ShflDown:
      return "__shfl_down_sync";
    case WarpKind::ShflXor:
      return "__shfl_xor_sync";
    case WarpKind::Ballot:
      return "__ballot_sync";
    case WarpKind::Any:
      return "__any_sync";
    case WarpKind::All:
      return "__all_sync";
    case WarpKind::Sync:
      return "__syncwarp";
    case WarpKind::ReduceAdd:
      return "__reduce_add_sync";
    case WarpKind::ReduceMin:
      return "__reduce_min_sync";
    case WarpKind::ReduceMax:
      return "__reduce_max_sync";
  }
  return "?";
}

Msg warp_site(const Fiber& g) {
  return fmt("%s at %s:%d (mask 0x%08x)", warp_kind_name(g.wk), g.wfile, g.wline, g.wmask);
}

// Lanes of f's warp that wait at a warp operation naming f's lane: f must not leave.
void check_no_warp_waiters(Fiber* f, const char* bar_file, int bar_line) {
  Block& B = *f->block;
  const uint32_t arr = B.arrived[size_t(f->warp)] & ~(1u << f->lane);
  if (arr == 0) return;
  for (int j = 0; j < 32; ++j)
    if (arr >> j & 1u) {
      const Fiber& g = B.f[f->warp * 32 + j];
      if (g.wmask >> f->lane & 1u)
        fail(f, fmt("warp divergence: %s %s while lane %d waits for it at %s",
                    thread_name(B, f->linear).c_str(),
                    bar_file ? fmt("reaches __syncthreads at %s:%d", bar_file, bar_line).c_str()
                             : "exits",
                    j, warp_site(g).c_str()));
    }
}

void on_exit(Fiber* f) {
  Block& B = *f->block;
  if (f->st == St::Aborted) return;
  ++B.done;
  B.done_mask[size_t(f->warp)] |= 1u << f->lane;
  if (B.bar_arrived > 0)
    fail(f, fmt("barrier divergence: %s exits while %d thread(s) wait at __syncthreads at %s:%d "
                "(first: %s)",
                thread_name(B, f->linear).c_str(), B.bar_arrived, B.bar_file, B.bar_line,
                thread_name(B, B.bar_first).c_str()));
  check_no_warp_waiters(f, nullptr, 0);
}

// ---------------------------------------------------------------- scheduling

bool in_lag_group(const Block& B, const Fiber& f, uint64_t seed) {
  const uint64_t b = uint64_t(B.ctx.bidx.x) + 7919ull * B.ctx.bidx.y + 104729ull * B.ctx.bidx.z;
  if (B.nwarps > 1) return uint64_t(f.warp) == (B.epoch + b + seed) % uint64_t(B.nwarps);
  return (f.lane >= 16) == (((B.epoch + b + seed) & 1u) == 0);
}

std::string describe_deadlock(const Block& B) {
  std::string s = "deadlock: no thread can run;";  // built on the scheduler, not a fiber
  int shown = 0;
  for (int i = 0; i < B.n && shown < 4; ++i) {
    const Fiber& g = B.f[i];
    if (g.st == St::WaitWarp) {
      s += std::string(" ") + thread_name(B, i).s + " waits at " + warp_site(g).s + ";";
      ++shown;
    }
  }
  if (B.bar_arrived > 0)
    s += fmt(" %d thread(s) wait at __syncthreads at %s:%d;", B.bar_arrived, B.bar_file, B.bar_line)
             .s;
  s += fmt(" %d exited", B.done).s;
  return s;
}

void run_block(Launch& L, uint64_t b, Worker& W) {
  const LaunchCfg& cfg = L.cfg;
  Block B;
  B.L = &L;
  B.ctx.bdim = cfg.block;
  B.ctx.gdim = cfg.grid;
  B.ctx.bidx = uint3{unsigned(b % cfg.grid.x), unsigned(b / cfg.grid.x % cfg.grid.y),
                     unsigned(b / (uint64_t(cfg.grid.x) * cfg.grid.y))};
  B.n = int(cfg.block.x * cfg.block.y * cfg.block.z);
  B.nwarps = (B.n + 31) / 32;
  B.arrived.assign(size_t(B.nwarps), 0u);
  B.done_mask.assign(size_t(B.nwarps), 0u);
  B.bar_wait.assign(size_t(B.nwarps), 0u);
  B.exist.assign(size_t(B.nwarps), 0xffffffffu);
  if (B.n % 32) B.exist.back() = (1u << (B.n % 32)) - 1u;
  ensure_stacks(W, size_t(B.n));
#ifdef AL_EMU_ASAN
  if (W.dirty) {
    __asan_unpoison_memory_region(W.stacks, W.nstacks * W.slot);
    W.dirty = false;
  }
#endif
  B.f = W.fibers.data();
  for (int i = 0; i < B.n; ++i) {
    Fiber& f = B.f[i];
    f.block = &B;
    f.st = St::Runnable;
    f.linear = i;
    f.warp = i / 32;
    f.lane = i % 32;
    f.ctx.tid = uint3{unsigned(i) % cfg.block.x, unsigned(i) / cfg.block.x % cfg.block.y,
                      unsigned(i) / (cfg.block.x * cfg.block.y)};
    f.fake = nullptr;
    init_fiber(&f);
  }
  if (posix_memalign(&B.dyn, 16, cfg.smem ? cfg.smem : 1) != 0) std::abort();
  std::memset(B.dyn, 0xff, cfg.smem);
  tl_block = &B.ctx;

  const Order order = L.opt.order;
  uint64_t rng = L.opt.seed * 0x9e3779b97f4a7c15ull + b;
  std::vector<int> perm(size_t(B.n));
  for (int i = 0; i < B.n; ++i) perm[size_t(i)] = order == Order::Reverse ? B.n - 1 - i : i;
  while (B.done < B.n && !B.failed) {
    if (order == Order::Random)
      for (int i = B.n - 1; i > 0; --i)
        std::swap(perm[size_t(i)], perm[splitmix(rng) % uint64_t(i + 1)]);
    bool ran = false;
    // A sweep ends early when a block barrier releases, so the order (and the lagged
    // group, chosen per barrier interval) applies from the release on.
    const uint64_t epoch = B.epoch;
    for (int pass = 0; pass < (order == Order::Lagged ? 2 : 1) && !ran && !B.failed; ++pass) {
      for (int i = 0; i < B.n && !B.failed && B.epoch == epoch; ++i) {
        Fiber& f = B.f[perm[size_t(i)]];
        if (f.st != St::Runnable) continue;
        if (order == Order::Lagged && in_lag_group(B, f, L.opt.seed) != (pass == 1)) continue;
        resume(W, &f);
        ran = true;
      }
    }
    if (!ran && !B.failed) {
      B.failed = true;
      B.msg = describe_deadlock(B);
    }
  }
  tl_thread = nullptr;
  W.cur = nullptr;
  tl_block = nullptr;
  if (B.failed) {
    W.dirty = true;
    std::lock_guard<std::mutex> lk(L.mu);
    if (b < L.fail_block) {
      L.fail_block = b;
      L.fail_msg = fmt("block (%u,%u,%u): ", B.ctx.bidx.x, B.ctx.bidx.y, B.ctx.bidx.z).s + B.msg;
    }
    L.failed = true;
  }
  for (SharedAlloc& s : B.shared) std::free(s.p);
  std::free(B.dyn);
}

void work(Launch& L) {
  Worker& W = tl_worker;
  W.switches = 0;
  for (;;) {
    if (L.failed) break;
    const uint64_t b = L.next.fetch_add(1);
    if (b >= L.nblocks) break;
    run_block(L, b, W);
  }
  L.switches += W.switches;
}

// A small persistent pool: a launch is shared by the calling thread and threads - 1 workers.
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : th_) t.join();
  }
  void run(Launch& L, int threads) {
    std::lock_guard<std::mutex> serial(run_mu_);
    const int helpers = int(std::min<uint64_t>(uint64_t(threads - 1), L.nblocks - 1));
    {
      std::unique_lock<std::mutex> lk(mu_);
      while (int(th_.size()) < helpers) {
        const int id = int(th_.size());
        th_.emplace_back([this, id] { loop(id); });
      }
      job_ = &L;
      want_ = helpers;
      active_ = helpers;
      ++gen_;
    }
    cv_.notify_all();
    work(L);
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return active_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(int id) {
    uint64_t seen = 0;
    for (;;) {
      Launch* L;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return stop_ || gen_ != seen; });
        if (stop_) return;
        seen = gen_;
        if (id >= want_) continue;
        L = job_;
      }
      work(*L);
      std::lock_guard<std::mutex> lk(mu_);
      if (--active_ == 0) done_cv_.notify_all();
    }
  }
  std::mutex run_mu_, mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> th_;
  Launch* job_ = nullptr;
  int want_ = 0, active_ = 0;
  uint64_t gen_ = 0;
  bool stop_ = false;
};
Pool& pool() {
  static Pool p;
  return p;
}

}  // namespace

// ---------------------------------------------------------------- yield points

int block_barrier(BarKind kind, int pred, const char* file, int line) {
  Fiber* f = current();
  Block& B = *f->block;
  if (B.done > 0) {
    int gone = 0;
    while (B.f[gone].st != St::Done) ++gone;
    fail(
        f,
        fmt("barrier divergence: %s reaches __syncthreads at %s:%d after %s (and %d in all) exited",
            thread_name(B, f->linear).c_str(), file, line, thread_name(B, gone).c_str(), B.done));
  }
  if (B.bar_arrived > 0 && (!same_site(file, line, B.bar_file, B.bar_line) || kind != B.bar_kind))
    fail(f, fmt("barrier divergence: %s reaches the barrier at %s:%d while %s waits at %s:%d",
                thread_name(B, f->linear).c_str(), file, line, thread_name(B, B.bar_first).c_str(),
                B.bar_file, B.bar_line));
  check_no_warp_waiters(f, file, line);
  if (B.bar_arrived == 0) {
    B.bar_file = file;
    B.bar_line = line;
    B.bar_kind = kind;
    B.bar_first = f->linear;
    B.bar_acc = kind == BarKind::And ? 1 : 0;
  }
  if (kind == BarKind::Count) B.bar_acc += pred;
  if (kind == BarKind::And) B.bar_acc &= pred;
  if (kind == BarKind::Or) B.bar_acc |= pred;
  f->st = St::WaitBlock;
  B.bar_wait[size_t(f->warp)] |= 1u << f->lane;
  if (++B.bar_arrived == B.n) {
    B.bar_result = B.bar_acc;
    B.bar_arrived = 0;
    ++B.epoch;
    for (int i = 0; i < B.n; ++i) B.f[i].st = St::Runnable;
    std::fill(B.bar_wait.begin(), B.bar_wait.end(), 0u);
  }
  yield(f);  // the order policy decides who runs first after the barrier
  return B.bar_result;
}

uint64_t warp_op(WarpKind kind, unsigned mask, uint64_t value, int param, int width,
                 const char* file, int line) {
  Fiber* f = current();
  Block& B = *f->block;
  const size_t w = size_t(f->warp);
  const int lane = f->lane;
#define who thread_name(B, f->linear)
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fail(f, fmt("%s at %s:%d: width %d is not a power of two in [1, 32]", warp_kind_name(kind),
                file, line, width));
  if (!(mask >> lane & 1u))
    fail(f, fmt("%s at %s:%d: %s calls it with mask 0x%08x, which does not name the caller",
                warp_kind_name(kind), file, line, who.c_str(), mask));
  if (mask & ~B.exist[w])
    fail(f, fmt("%s at %s:%d: mask 0x%08x names lanes absent from warp %zu (lanes present 0x%08x, "
                "block of %d threads)",
                warp_kind_name(kind), file, line, mask, w, B.exist[w], B.n));
  if (mask & B.done_mask[w])
    fail(f, fmt("%s at %s:%d: mask 0x%08x names exited lanes 0x%08x of warp %zu",
                warp_kind_name(kind), file, line, mask, mask & B.done_mask[w], w));
  f->wk = kind;
  f->wmask = mask;
  f->wval = value;
  f->wparam = param;
  f->wwidth = width;
  f->wfile = file;
  f->wline = line;
  if (mask & B.bar_wait[w]) {
    const int j = __builtin_ctz(mask & B.bar_wait[w]);
    fail(
        f,
        fmt("warp divergence: %s waits at %s:%d for lane %d, which waits at __syncthreads at %s:%d",
            who.c_str(), file, line, j, B.bar_file, B.bar_line));
  }
  auto same_op = [&](const Fiber& g) {
    return g.wk == kind && g.wmask == mask && g.wwidth == width &&
           same_site(g.wfile, g.wline, file, line);
  };
  auto mismatch = [&](int j) {
    fail(f, fmt("warp divergence: %s reaches %s at %s:%d (mask 0x%08x) while lane %d waits at %s",
                who.c_str(), warp_kind_name(kind), file, line, mask, j,
                warp_site(B.f[w * 32 + size_t(j)]).c_str()));
  };
  // One waiting lane of the mask stands for all of them (all are compared at completion);
  // waiting lanes outside the mask must not be waiting for this lane.
  const uint32_t others = B.arrived[w] & ~(1u << lane);
  if (const uint32_t in = others & mask) {
    const int j = __builtin_ctz(in);
    if (!same_op(B.f[w * 32 + size_t(j)])) mismatch(j);
  }
  for (uint32_t out = others & ~mask; out; out &= out - 1) {
    const int j = __builtin_ctz(out);
    if (B.f[w * 32 + size_t(j)].wmask >> lane & 1u) mismatch(j);
  }
#undef who
  B.arrived[w] |= 1u << lane;
  if ((B.arrived[w] & mask) != mask) {
    f->st = St::WaitWarp;
    yield(f);
    return f->wres;
  }
  // Every lane of the mask is here: compute all results, then release the lanes.
  Fiber* lanes = &B.f[w * 32];
  for (uint32_t m = mask & ~(1u << lane); m; m &= m - 1)
    if (!same_op(lanes[__builtin_ctz(m)])) mismatch(__builtin_ctz(m));
  uint32_t pred_bits = 0;
  for (int j = 0; j < 32; ++j)
    if ((mask >> j & 1u) && lanes[j].wval != 0) pred_bits |= 1u << j;
  int64_t red = 0;
  bool first = true;
  for (int j = 0; j < 32; ++j) {
    if (!(mask >> j & 1u)) continue;
    const int64_t v =
        param ? int64_t(int32_t(uint32_t(lanes[j].wval))) : int64_t(uint32_t(lanes[j].wval));
    if (kind == WarpKind::ReduceAdd) red += v;
    if (kind == WarpKind::ReduceMin) red = first ? v : std::min(red, v);
    if (kind == WarpKind::ReduceMax) red = first ? v : std::max(red, v);
    first = false;
  }
  for (int j = 0; j < 32; ++j) {
    if (!(mask >> j & 1u)) continue;
    Fiber& g = lanes[j];
    const int seg = j & ~(width - 1);
    int src = j;
    switch (kind) {
      case WarpKind::ShflIdx:
        src = seg + (param & (width - 1));
        break;
      case WarpKind::ShflUp:
        src = j - param >= seg ? j - param : j;
        break;
      case WarpKind::ShflDown:
        src = j + param < seg + width ? j + param : j;
        break;
      case WarpKind::ShflXor:
        src = (j ^ param) < seg + width && (j ^ param) < 32 ? (j ^ param) : j;
        break;
      default:
        break;
    }
    switch (kind) {
      case WarpKind::ShflIdx:
      case WarpKind::ShflUp:
      case WarpKind::ShflDown:
      case WarpKind::ShflXor:
        if (!(mask >> src & 1u))
          fail(f, fmt("%s at %s:%d: lane %d reads lane %d, which is not in mask 0x%08x (undefined "
                      "on the device)",
                      warp_kind_name(kind), file, line, j, src, mask));
        g.wres = lanes[src].wval;
        break;
      case WarpKind::Ballot:
        g.wres = pred_bits;
        break;
      case WarpKind::Any:
        g.wres = pred_bits != 0;
        break;
      case WarpKind::All:
        g.wres = pred_bits == mask;
        break;
      case WarpKind::Sync:
        g.wres = 0;
        break;
      case WarpKind::ReduceAdd:
      case WarpKind::ReduceMin:
      case WarpKind::ReduceMax:
        g.wres = uint64_t(uint32_t(int32_t(red)));
        break;
    }
  }
  B.arrived[w] &= ~mask;
  for (int j = 0; j < 32; ++j)
    if (mask >> j & 1u) lanes[j].st = St::Runnable;
  yield(f);
  return f->wres;
}

unsigned active_mask() {
  Fiber* f = current();
  const Block& B = *f->block;
  return B.exist[size_t(f->warp)] & ~B.done_mask[size_t(f->warp)];
}

void* dynamic_shared() { return current()->block->dyn; }

void* static_shared(const char* key, size_t bytes, size_t align) {
  Fiber* f = current();
  Block& B = *f->block;
  for (SharedAlloc& s : B.shared)
    if (s.key == key || std::strcmp(s.key, key) == 0) return s.p;
  B.static_bytes += bytes;
  if (B.static_bytes > kStaticSmemLimit)
    fail(f, fmt("static __shared__ memory of %zu bytes (at %s) exceeds the %zu-byte limit",
                B.static_bytes, key, kStaticSmemLimit));
  if (B.static_bytes + B.L->cfg.smem > kSmemOptin)
    fail(f, fmt("static (%zu) + dynamic (%zu) shared memory exceeds the %zu-byte per-block limit",
                B.static_bytes, B.L->cfg.smem, kSmemOptin));
  void* p = nullptr;
  if (posix_memalign(&p, std::max<size_t>(align, 16), bytes) != 0) std::abort();
  std::memset(p, 0xff, bytes);
  B.shared.push_back({key, p, bytes});
  return p;
}

void thread_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

void run_launch(const LaunchCfg& cfg, const void* kernel, const char* name, int max_threads,
                Body body, void* closure, const char* file, int line) {
  const std::string where = fmt("%s launched at %s:%d", name, file, line).s;
  const dim3 g = cfg.grid, b = cfg.block;
  const uint64_t threads = uint64_t(b.x) * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024)
    return set_error(
        cudaErrorInvalidConfiguration,
        fmt("%s: block (%u,%u,%u) is outside the limits (x, y <= 1024, z <= 64, x*y*z <= 1024)",
            where.c_str(), b.x, b.y, b.z));
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535)
    return set_error(cudaErrorInvalidConfiguration,
                     fmt("%s: grid (%u,%u,%u) is outside the limits (x < 2^31, y, z <= 65535)",
                         where.c_str(), g.x, g.y, g.z));
  if (max_threads > 0 && threads > uint64_t(max_threads))
    return set_error(cudaErrorLaunchOutOfResources,
                     fmt("%s: %llu threads per block exceed the kernel's __launch_bounds__(%d)",
                         where.c_str(), static_cast<unsigned long long>(threads), max_threads));
  size_t dyn_limit = kDynSmemDefault;
  {
    std::lock_guard<std::mutex> lk(g_attr_mu);
    const auto it = g_max_dyn_smem.find(kernel);
    if (it != g_max_dyn_smem.end()) dyn_limit = size_t(it->second);
  }
  if (cfg.smem > dyn_limit)
    return set_error(
        cudaErrorInvalidValue,
        fmt("%s: %zu bytes of dynamic shared memory exceed the kernel's limit of %zu%s",
            where.c_str(), cfg.smem, dyn_limit,
            dyn_limit == kDynSmemDefault ? " (raise it with cudaFuncSetAttribute)" : ""));
  Launch L;
  L.cfg = cfg;
  L.name = name;
  L.body = body;
  L.closure = closure;
  L.file = file;
  L.line = line;
  L.opt = options();
  L.dyn_limit = dyn_limit;
  L.nblocks = uint64_t(g.x) * g.y * g.z;
  pool().run(L, L.opt.threads);
  ++g_launches;
  g_switches += L.switches;
  if (L.failed) {
    set_error(cudaErrorLaunchFailure, where + ", " + L.fail_msg);
    tl_exec_error = cudaErrorLaunchFailure;
  }
}

cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute a, int v) {
  if (a == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (v < 0 || size_t(v) > kSmemOptin) return tl_last_error = cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lk(g_attr_mu);
    g_max_dyn_smem[kernel] = v;
  }
  return cudaSuccess;
}

cudaError_t occupancy(int* blocks, const void*, int block_size, size_t smem) {
  if (block_size <= 0 || block_size > 1024) return *blocks = 0, cudaSuccess;
  const int warps = (block_size + 31) / 32;
  int n = std::min(32, 64 / warps);  // 2048 threads = 64 warps per SM
  n = std::min<int>(n, int(kSmemPerSm / (smem + kSmemReservedPerBlock)));
  *blocks = n;
  return cudaSuccess;
}

}  // namespace detail

void set_order(Order o, uint64_t seed) {
  detail::options();
  std::lock_guard<std::mutex> lk(detail::g_opt_mu);
  detail::g_opt.order = o;
  detail::g_opt.seed = seed;
}
Order order() { return detail::options().order; }
void set_threads(int n) {
  detail::options();
  std::lock_guard<std::mutex> lk(detail::g_opt_mu);
  detail::g_opt.threads = std::max(1, n);
}
void set_sms(int n) {
  detail::options();
  std::lock_guard<std::mutex> lk(detail::g_opt_mu);
  detail::g_opt.sms = std::max(1, n);
}
const char* take_failure() {
  static thread_local std::string s;
  s = detail::tl_failure;
  detail::tl_failure.clear();
  return s.c_str();
}
uint64_t launches() { return detail::g_launches; }
uint64_t switches() { return detail::g_switches; }

}  // namespace cuda_emu

// ---------------------------------------------------------------- host API

using cuda_emu::detail::tl_exec_error;
using cuda_emu::detail::tl_last_error;

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDeviceFunction:
      return "cudaErrorInvalidDeviceFunction";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorLaunchOutOfResources:
      return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (cuda_emu: see the message above)";
  }
  return "unknown error";
}
cudaError_t cudaGetLastError() {
  const cudaError_t e = tl_last_error;
  tl_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return tl_last_error; }
cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess : (tl_last_error = cudaErrorInvalidValue);
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return tl_last_error = cudaErrorInvalidValue;
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "cuda_emu (CPU emulation, sm_90 limits)");
  p->totalGlobalMem = size_t(16) << 30;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->maxThreadsPerMultiProcessor = 2048;
  p->maxBlocksPerMultiProcessor = 32;
  p->multiProcessorCount = cuda_emu::detail::options().sms;
  p->major = 9;
  p->minor = 0;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 << 20;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return cudaErrorInvalidValue;
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock:
      *v = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *v = int(p.sharedMemPerBlock);
      break;
    case cudaDevAttrWarpSize:
      *v = 32;
      break;
    case cudaDevAttrMultiProcessorCount:
      *v = p.multiProcessorCount;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *v = p.maxThreadsPerMultiProcessor;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *v = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *v = p.minor;
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *v = int(p.sharedMemPerMultiprocessor);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *v = int(p.sharedMemPerBlockOptin);
      break;
    default:
      return tl_last_error = cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  const cudaError_t e = tl_exec_error;
  tl_exec_error = cudaSuccess;
  return e;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaDeviceSynchronize(); }
cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  if (posix_memalign(p, 256, bytes ? bytes : 1) != 0)
    return tl_last_error = cudaErrorMemoryAllocation;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) return e;
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind k,
                            cudaStream_t) {
  if (bytes) std::memmove(dst, src, bytes);
  (void)k;
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int v, size_t bytes) {
  if (bytes) std::memset(p, v, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int v, size_t bytes, cudaStream_t) {
  return cudaMemset(p, v, bytes);
}
