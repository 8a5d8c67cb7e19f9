// How the fused step's threads meet between phases (team_step.h). Two ways, the same bits:
//   barrier: each thread computes its static share of a phase, then all meet at an OpenMP barrier;
//   redo:    each thread marks its share of a phase begun, computes it and marks it done (epochs per phase and
//            share); a thread done with its own share that finds another's not begun, or begun and overdue,
//            computes that share itself, marks it and goes on. A preempted thread, when it runs again, finishes
//            what it was doing (writing the values already there) and skips every share marked done, up to where
//            the team is.
// Why: served, the front-ends (detokenizer, HTTP server, client) wake once a token on the last core, whose
// step thread they preempt for 0.1-0.3 ms at a time, while a one-row phase lasts 10-60 us: at a barrier the other
// thread waits all of it (bench/step_interference.py: a competitor busy 0.7 ms every 3.5 ms on the last core
// cost the one-row step 0.7 ms). With redo the other thread carries on alone at one thread's speed.
// Redo holds only where computing a share twice, even twice at once, is harmless: every phase of a step writes
// buffers that no later phase of the step writes (run_team gives each layer its own in redo mode; the KV slots a
// layer writes are its own), reads only what earlier phases wrote, and stores each value once, never adding to
// what is there (so a model whose products add a bias in place keeps the barriers). The buffers cost a layer's
// activations for every layer, so redo serves steps of at most kRedoRows rows (decode of a few requests, a
// speculative verify), where the phases are short and the buffers small. The region's own start and end stay
// OpenMP's joins. Included by team_step.h.
#pragma once
#include <x86intrin.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kRedoRows = 9;  // the most rows a redo step takes (a verify of 8 drafts and its last token)
constexpr int kRedoTeam = 8;      // the most threads: a phase's done marks fill one cache line
inline bool g_step_redo = true;   // set between steps (set_step_redo), never while one runs
// How long a thread that has finished its share waits for another's before computing it: a share not yet begun
// kRedoGraceUs (its thread is off its core: the shares are balanced, so it had about as long to begin as this
// one took to finish), a begun one its own share's time plus a quarter plus kRedoMarginUs. On the 2-core Zen 4 EPYC
// against a competitor on the last core (bench/step_interference.py), before the grace existed, margins of 2-5 us
// took over 20-50 shares a one-row step and won 7-12%, 10 us 3%; with the grace the one-row step beside the
// competitor ran as fast as alone
constexpr double kRedoMarginUs = 3.0, kRedoGraceUs = 2.0;
inline std::atomic<int64_t> g_redo_taken{0};  // shares a thread computed for another (step_redo_taken)
// The tests' way to take a thread off its core: thread g_stall_thread sleeps g_stall_us before its share of phase
// g_stall_phase of every step, or with g_stall_replay in the middle of it: it computes the share, sleeps while the
// others take it over and go on, then computes it again, as a thread preempted before its stores would write them
// long after (stall_step_thread; -1: never)
inline int g_stall_thread = -1;
inline int64_t g_stall_phase = -1, g_stall_us = 0;
inline bool g_stall_replay = false;

// TSC ticks in a microsecond, measured once against the steady clock (the spin's deadline reads the TSC: a few ns)
inline double tsc_per_us() {
  static const double rate = [] {
    const auto t0 = std::chrono::steady_clock::now();
    const uint64_t c0 = __rdtsc();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::microseconds(200)) {
    }
    const uint64_t c1 = __rdtsc();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    return static_cast<double>(c1 - c0) / us;
  }();
  return rate;
}

// One calling thread's redo state, kept across its steps: the done marks (phase p's at [p * kRedoTeam, ...)), the
// epoch that marks this step's (never reused, so marks need no reset), and the per-layer buffers (grown, never
// shrunk: a step's values are all written before they are read, so nothing is zeroed)
struct RedoState {
  std::vector<uint64_t> marks;
  uint64_t epoch = 0;
  std::vector<float> floats;
  std::vector<int16_t> ints;
  uint64_t margin = 0;  // ticks a waiting thread adds to its own share's time before it takes a begun share over
  uint64_t grace = 0;   // ticks it waits for another thread to begin its share before taking it over
};

inline RedoState& redo_state(int64_t phases, int64_t floats, int64_t ints) {
  thread_local RedoState s;
  if (static_cast<int64_t>(s.marks.size()) < phases * kRedoTeam) s.marks.assign(phases * kRedoTeam, 0);
  if (static_cast<int64_t>(s.floats.size()) < floats) s.floats.resize(floats);
  if (static_cast<int64_t>(s.ints.size()) < ints) s.ints.resize(ints);
  if (s.margin == 0) s.margin = static_cast<uint64_t>(kRedoMarginUs * tsc_per_us()) + 1;
  if (s.grace == 0) s.grace = static_cast<uint64_t>(kRedoGraceUs * tsc_per_us()) + 1;
  ++s.epoch;
  return s;
}

// [begin, end) of thread tid's share of n items (at::parallel_for's static split)
inline void share(int64_t n, int tid, int nt, int64_t* begin, int64_t* end) {
  *begin = n * tid / nt;
  *end = n * (tid + 1) / nt;
}

// A phase of `n` items in thread tid's hands (the team: nt threads, the same calls in the same order in each):
// work(i0, i1) computes items [i0, i1). `marks`: the phase's kRedoTeam marks (redo), or null (barrier); `at`: the
// phase's index in the step (the stall's)
template <typename Work>
inline void team_phase(int tid, int nt, int64_t n, uint64_t* marks, uint64_t epoch, uint64_t margin, uint64_t grace, Work&& work,
                       int64_t at = -1) {
  const bool stall = tid == g_stall_thread && at == g_stall_phase;
  if (stall && !g_stall_replay) std::this_thread::sleep_for(std::chrono::microseconds(g_stall_us));
  auto part = [&](int t) {
    int64_t i0, i1;
    share(n, t, nt, &i0, &i1);
    work(i0, i1);
  };
  if (marks == nullptr) {
    part(tid);
#pragma omp barrier
    return;
  }
  const uint64_t arrived = 2 * epoch, done = 2 * epoch + 1;  // a share's mark: its thread has begun it, or it is done
  uint64_t own = 0;
  if (__atomic_load_n(marks + tid, __ATOMIC_ACQUIRE) != done) {  // not done by another while this thread was away
    __atomic_store_n(marks + tid, arrived, __ATOMIC_RELAXED);
    const uint64_t t0 = __rdtsc();
    part(tid);
    if (stall && g_stall_replay) {
      std::this_thread::sleep_for(std::chrono::microseconds(g_stall_us));
      part(tid);
    }
    own = __rdtsc() - t0;
    __atomic_store_n(marks + tid, done, __ATOMIC_RELEASE);
  }
  for (int t = 0; t < nt; ++t) {
    if (t == tid) continue;
    const uint64_t start = __rdtsc();
    for (uint64_t v; (v = __atomic_load_n(marks + t, __ATOMIC_ACQUIRE)) != done; _mm_pause()) {
      // a thread that has not even begun its share by now is off its core; one that has gets its share's time and more
      const uint64_t limit = v < arrived ? grace : own + own / 4 + margin;
      if (__rdtsc() - start > limit) {  // overdue: the same bits from here
        part(t);
        g_redo_taken.fetch_add(1, std::memory_order_relaxed);
        __atomic_store_n(marks + t, done, __ATOMIC_RELEASE);
        break;
      }
    }
  }
}

}  // namespace
