// SPDX-License-Identifier: Apache-2.0
// API-sequence fuzzer: bytes -> a sequence of manager calls (autocast regions, grad mode, backward
// scopes, checkpoint frames and replays, casts, requests from several threads, flushes, failing
// collectives, exceptions unwinding through guards, save/load, module forwards and their tickets,
// backward tasks of a small fuzz-driven engine). The first byte picks the boundary: autocast_entry,
// explicit_scope, engine_callback<fuzz_hooks> (graph_hooks' minimum) or engine_callback<full_fuzz_hooks>
// (task depth and drop notice: nested tasks of any kind), first_module_owner. After every event the manager is
// compared with a small reference model of ARCHITECTURE §3-§4 (depths, flags, counters, pending,
// snapshots, every slot's staging amax and scale, the scale and amax pointer each cast gets, the
// callbacks queued on each task, each ticket's ownership). Misuse must raise tequant::error exactly
// where the model expects it and leave the state as it was; anything else aborts.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/boundary/first_module_owner.hpp"
#include "tequant/comm/concepts.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/persistence/state.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

[[noreturn]] void violated(const char* what, int line) {
  std::fprintf(stderr, "fuzz_api: invariant violated at line %d: %s\n", line, what);
  std::abort();
}
#define FZ_CHECK(cond) \
  do {                 \
    if (!(cond)) violated(#cond, __LINE__); \
  } while (0)

struct fuzz_comm {
  using policy_kind = tequant::comm_kind;
  bool* fail_next = nullptr;
  void all_reduce_max(float*, std::size_t, std::uint32_t) {
    if (*fail_next) {
      *fail_next = false;
      throw tequant::error("fuzz: injected collective failure");
    }
  }
  std::uint32_t rank() const noexcept { return 0; }
  std::uint32_t size(std::uint32_t) const noexcept { return 1; }
};

struct injected {};

/// The fuzz engine's backward tasks: one callback list per running task (innermost last). A task
/// that ends normally runs its callbacks (while it is still current, as PyTorch does); a task that
/// ends with an exception drops them. `can_queue == false` is an engine without final callbacks.
struct fuzz_tasks {
  struct callback {
    void (*fn)(void*);
    void* ctx;
    void (*dropped)(void*) = nullptr;  // the full hooks' drop notice
  };
  mutable std::mutex mutex;  // graph_hooks may be called from several threads (the threads event)
  std::vector<std::vector<callback>> tasks;
  bool can_queue = true;
};

struct fuzz_hooks {
  fuzz_tasks* t = nullptr;
  bool in_backward() const {
    if (t == nullptr) return false;
    std::lock_guard<std::mutex> lock(t->mutex);
    return !t->tasks.empty();
  }
  bool queue_callback(void (*fn)(void*), void* ctx) { return queue(fn, nullptr, ctx); }

 protected:
  bool queue(void (*fn)(void*), void (*dropped)(void*), void* ctx) {
    if (t == nullptr) return false;
    std::lock_guard<std::mutex> lock(t->mutex);
    if (t->tasks.empty() || !t->can_queue) return false;
    t->tasks.back().push_back({fn, ctx, dropped});
    return true;
  }
};
static_assert(tequant::graph_hooks<fuzz_hooks>);
using hooked_boundary = tequant::engine_callback<fuzz_hooks>;

/// The optional members too: the task's depth and a drop notice.
struct full_fuzz_hooks : fuzz_hooks {
  bool queue_callback(void (*fn)(void*), void* ctx) { return queue(fn, nullptr, ctx); }
  bool queue_callback(void (*fn)(void*), void (*dropped)(void*), void* ctx) { return queue(fn, dropped, ctx); }
  std::uint32_t task_depth() const {
    if (t == nullptr) return 0;
    std::lock_guard<std::mutex> lock(t->mutex);
    return t->tasks.empty() ? 0u : static_cast<std::uint32_t>(t->tasks.size() - 1);
  }
};
static_assert(tequant::hooks_with_task_depth<full_fuzz_hooks> && tequant::hooks_with_drop_notice<full_fuzz_hooks>);
using full_hooked_boundary = tequant::engine_callback<full_fuzz_hooks>;

/// A guard of any kind, destroyed by `delete` so that a throwing guard destructor propagates.
struct any_guard {
  virtual ~any_guard() noexcept(false) = default;
  int kind = 0;  // 0 autocast, 1 grad, 2 scope, 3 frame, 4 backward task of the fuzz engine
};
template <class G>
struct boxed : any_guard {
  G g;
  boxed(G&& x, int k) : g(std::move(x)) { kind = k; }
  ~boxed() noexcept(false) override = default;
};

constexpr std::uint32_t L = 3;
const std::array<float, 8> values = {0.0f, 1.0f, 2.5f, 448.0f, 1e-40f, 3e38f,
                                     __builtin_inff(), __builtin_nanf("")};

/// Reference delayed-scaling slot (TE's fused rule, naive window).
struct ref_slot {
  float staging = 0, scale = 1;
  std::vector<float> hist;  // committed, oldest first, at most L
  void update(float sm) {
    const float c = staging;
    if (c == 0.0f) return;
    hist.push_back(c);
    if (hist.size() > L) hist.erase(hist.begin());
    float a = 0;
    for (float h : hist) a = tequant::detail::nan_ignoring_max(a, h);
    if (tequant::detail::is_finite(a) && a > 0) scale = sm / a;
    if (tequant::detail::is_inf(scale)) scale = tequant::detail::float_max;
    staging = 0;
  }
};

struct ref_frame {
  enum { idle, recording, ready, replaying } phase = idle;
  std::map<std::uint64_t, float> snap;
  bool enabled = false;  // the autocast state its original forward ran under (its replay's)
};

template <class Boundary>
struct harness {
  using manager = tequant::quantization_manager<tequant::delayed_scaling<>, Boundary, tequant::stacked_recompute, fuzz_comm>;
  // What each boundary promises (ARCHITECTURE §3), spelled from the type, not from its traits.
  static constexpr bool scoped = std::is_same_v<Boundary, tequant::explicit_scope>;
  // full: hooks with task depth and drop notice (nested tasks of any kind, failed tasks noticed).
  static constexpr bool full = std::is_same_v<Boundary, full_hooked_boundary>;
  static constexpr bool hooked = full || std::is_same_v<Boundary, hooked_boundary>;
  static constexpr bool owner_rule = std::is_same_v<Boundary, tequant::first_module_owner>;
  static constexpr bool entry_flush = hooked || std::is_same_v<Boundary, tequant::autocast_entry>;

  bool fail_next = false;
  fuzz_tasks tasks;  // before m: the manager's hooks point at it
  manager m;
  std::array<tequant::checkpoint_frame, 3> frames{tequant::checkpoint_frame("f0"), tequant::checkpoint_frame("f1"),
                                                  tequant::checkpoint_frame("f2")};
  std::vector<any_guard*> guards;
  std::vector<tequant::slot_id> fwd, bwd;

  // ---- the reference model ----
  struct ref_guard {
    int kind;
    bool enabled = false, prev_enabled = false, prev_grad = true;
    int frame = -1, frame_mode = 0;  // 0 inactive, 1 recording, 2 replaying
    bool prev_owner = false;
  };
  /// A backward task of the fuzz engine.
  struct ref_task {
    std::size_t callbacks = 0;  // the manager's callbacks queued on it
    bool replayed = false;      // a checkpoint_replay was opened while it was the innermost task
    bool nested = false;
    bool stale_at_open = false;  // the manager's "queued" flag was left set by a task that failed
    bool requested = false;      // a request outside any scope ran inside it (or a nested task)
  };
  std::vector<ref_task> rt;
  bool cb_flag = false;   // the manager's "a callback is queued" flag (may be stale after a failed task)
  int cb_task = -1;       // the live task that really holds the callback, or -1
  bool scope_in_bwd = false;
  bool can_queue = true;
  bool owner = false;     // first_module_owner's ownership flag
  std::array<tequant::backward_ticket, 4> tickets{};
  std::vector<ref_guard> rg;
  std::map<std::uint64_t, ref_slot> slots;  // key: dir << 63 | bucket << 32 | index
  std::array<ref_frame, 3> rf;
  std::vector<std::pair<int, int>> open_frames;  // (frame, mode)
  bool pending = false, grad = true, q_enabled = false;
  bool recover = false;  // a scope unwound: the next top-level autocast entry flushes (not first_module_owner)
  bool model_fail_next = false;  // the model's copy of fail_next (the comm consumes its own)
  std::uint32_t autocast_depth = 0, scope_depth = 0, replay_depth = 0;
  std::uint64_t fwd_updates = 0, bwd_updates = 0;
  std::size_t outstanding = 0;

  static tequant::delayed_params params() {
    tequant::delayed_params p;
    p.history_length = L;
    return p;
  }
  static std::uint64_t key(tequant::slot_id s) {
    return (static_cast<std::uint64_t>(s.dir == tequant::direction::backward) << 63) |
           (static_cast<std::uint64_t>(s.bucket) << 32) | s.index;
  }

  Boundary make_boundary() {
    if constexpr (full)
      return Boundary(full_fuzz_hooks{{&tasks}});
    else if constexpr (hooked)
      return Boundary(fuzz_hooks{&tasks});
    else
      return Boundary{};
  }

  explicit harness(std::uint8_t layout) : m(params(), make_boundary(), fuzz_comm{&fail_next}) {
    const int modules = 1 + layout % 3;
    for (int i = 0; i < modules; ++i) {
      const std::uint32_t gemms = 1 + ((layout >> (2 + i)) & 1);
      // (Fixed names: "m" + std::to_string(i) trips g++ 12's -Wrestrict false positive at -O3.)
      static constexpr const char* names[] = {"m0", "m1", "m2"};
      const auto h = m.register_module(names[i], gemms, {static_cast<std::uint32_t>((layout >> 5) & i & 1), 0});
      for (std::uint32_t g = 0; g < gemms; ++g) {
        for (auto r : {tequant::forward_role::input, tequant::forward_role::weight, tequant::forward_role::output})
          fwd.push_back(m.slot(h, r, g));
        for (auto r : {tequant::backward_role::grad_output, tequant::backward_role::grad_input})
          bwd.push_back(m.slot(h, r, g));
      }
    }
    for (auto s : fwd) slots[key(s)];
    for (auto s : bwd) slots[key(s)];
  }

  ~harness() {
    while (!guards.empty()) pop(false, true);
  }

  void run_update(tequant::direction d) {
    const float sm = d == tequant::direction::forward ? 448.0f : 57344.0f;
    for (auto& [k, s] : slots)
      if ((k >> 63) == (d == tequant::direction::backward ? 1u : 0u)) s.update(sm);
  }
  // A collective fails before any bucket is updated: the model changes nothing.
  bool model_update(tequant::direction d, bool& threw) {
    if (model_fail_next) {
      model_fail_next = false;
      threw = true;
      return false;
    }
    run_update(d);
    return true;
  }
  void model_flush(bool& threw) {
    if (!pending) return;
    if (model_update(tequant::direction::backward, threw)) {
      pending = false;
      ++bwd_updates;
    }
  }

  template <class F>
  static bool throws_tequant(F&& f) {
    try {
      f();
    } catch (const tequant::error& e) {
      FZ_CHECK(std::string(e.what()).rfind("tequant: ", 0) == 0);
      return true;
    }
    return false;
  }

  /// A call that must leave the state as it was when it throws (strong guarantee; misuse and failed
  /// flushes): the saved bytes and the stats are compared before and after.
  // (Only where the model expects the error: saving the state before every call would cost most of
  // the fuzzer's time; an unexpected error fails the caller's check anyway.)
  template <class F>
  bool strong(bool expect_error, F&& f) {
    if (!expect_error) return throws_tequant(std::forward<F>(f));
    const auto bytes = tequant::state_bytes(m);
    const auto st = m.stats();
    const bool threw = throws_tequant(std::forward<F>(f));
    if (threw) {
      const auto now = m.stats();
      FZ_CHECK(tequant::state_bytes(m) == bytes);
      FZ_CHECK(now.forward_updates == st.forward_updates && now.backward_updates == st.backward_updates);
      FZ_CHECK(now.collectives == st.collectives && now.pending == st.pending);
      FZ_CHECK(now.autocast_depth == st.autocast_depth && now.scope_depth == st.scope_depth);
      FZ_CHECK(now.checkpoint_depth == st.checkpoint_depth && now.outstanding_snapshots == st.outstanding_snapshots);
    }
    return threw;
  }

  void push(any_guard* g) { guards.push_back(g); }

  /// The manager queues a callback on the current task (engine_callback): once per logical backward,
  /// only inside a task, only where the engine can queue; a set flag means "already queued".
  bool model_queue() {
    if (!hooked) return false;
    if (full && rt.size() > 1) return false;  // a nested task never queues
    if (cb_flag) return true;
    if (rt.empty() || !can_queue) return false;
    cb_flag = true;
    cb_task = static_cast<int>(rt.size()) - 1;
    ++rt.back().callbacks;
    return true;
  }

  std::vector<fuzz_tasks::callback> hook_callbacks(std::size_t task) {
    std::lock_guard<std::mutex> lock(tasks.mutex);
    return tasks.tasks[task];
  }

  // Ends the innermost task: normally (its callbacks run) or by an exception (they are dropped).
  void close_task(bool unwinding, bool quiet) {
    const ref_task t = rt.back();
    rt.pop_back();
    const bool held = cb_task == static_cast<int>(rt.size());
    if (held) cb_task = -1;
    bool expect_throw = false;
    const auto before = m.stats();
    const bool pending_before = pending;
    if (!unwinding && held) {  // the manager's callback runs
      cb_flag = false;
      scope_in_bwd = false;
      if (scope_depth == 0) model_flush(expect_throw);
    }
    if (unwinding && held && full) cb_flag = false;  // the drop notice
    // (Unwinding: the engine drops the callback; the manager's flag stays set until the next
    // top-level autocast entry or a backward scope outside any task, graph_hooks contract 3.)
    const std::size_t index = rt.size();
    FZ_CHECK(hook_callbacks(index).size() == t.callbacks);
    // Spec: one callback per logical backward, on the outermost task; a nested (reentrant) task never
    // queues one (the contract: its replay was opened in the outer task first).
    FZ_CHECK(t.callbacks <= 1);
    if (t.nested) FZ_CHECK(t.callbacks == 0);
    bool threw = false;
    if (unwinding) {
      std::vector<fuzz_tasks::callback> dropped;
      {
        std::lock_guard<std::mutex> lock(tasks.mutex);
        dropped = tasks.tasks.back();
      }
      for (const auto& cb : dropped)
        if (cb.dropped != nullptr) cb.dropped(cb.ctx);
    } else {
      threw = throws_tequant([&] {
        for (std::size_t i = 0;; ++i) {
          fuzz_tasks::callback cb{};
          {
            std::lock_guard<std::mutex> lock(tasks.mutex);
            if (i >= tasks.tasks.back().size()) break;
            cb = tasks.tasks.back()[i];
          }
          cb.fn(cb.ctx);
        }
      });
    }
    {
      std::lock_guard<std::mutex> lock(tasks.mutex);
      tasks.tasks.pop_back();
    }
    if (quiet) return;
    FZ_CHECK(threw == expect_throw);
    const auto after = m.stats();
    // Spec: a nested task's end never flushes (too early).
    if (hooked && t.nested && !unwinding) FZ_CHECK(after.backward_updates == before.backward_updates);
    // Spec: a logical backward (top-level task) that requested the update, with a callback it could
    // queue, flushes exactly once at its end.
    if (hooked && !t.nested && !unwinding && can_queue && !t.stale_at_open && t.requested && scope_depth == 0 &&
        pending_before && !expect_throw) {
      FZ_CHECK(after.backward_updates == before.backward_updates + 1);
      FZ_CHECK(!after.pending);
    }
  }

  // Pops the innermost guard normally, or while an exception unwinds through it.
  void pop(bool unwinding, bool quiet = false) {
    if (guards.empty()) return;
    any_guard* g = guards.back();
    guards.pop_back();
    const ref_guard r = rg.back();
    rg.pop_back();
    if (std::getenv("TEQUANT_FUZZ_TRACE") != nullptr)
      std::fprintf(stderr, "pop kind %d%s pending %d\n", r.kind, unwinding ? " unwinding" : "", int(pending));
    if (r.kind == 4) {
      delete g;
      close_task(unwinding, quiet);
      return;
    }
    bool threw = false, expect_throw = false;
    // Model first (it decides whether the manager should throw).
    switch (r.kind) {
      case 0:
        --autocast_depth;
        q_enabled = r.prev_enabled;
        if (owner_rule) owner = r.prev_owner;  // TE main: restored on every exit
        if (r.enabled && autocast_depth == 0 && grad && replay_depth == 0 && !unwinding) {
          if (model_update(tequant::direction::forward, expect_throw)) ++fwd_updates;
        }
        break;
      case 1: grad = r.prev_grad; break;
      case 2:
        --scope_depth;
        if (scope_depth == 0) {
          // Opened inside a task whose callback is queued: that callback flushes, not this exit.
          // Known limit of hooks without a drop notice (docs/graph_hooks.md): the manager trusts its
          // flag, so after a task that failed holding the callback (cb_flag set, cb_task < 0) neither
          // this exit nor the task's end flushes; the next top-level autocast entry does.
          const bool left_to_callback = std::exchange(scope_in_bwd, false);
          if (!left_to_callback && !unwinding) model_flush(expect_throw);
          // A logical backward that raised: its update runs at the next top-level autocast entry.
          if (unwinding && !owner_rule) recover = true;
        }
        break;
      case 3: {
        open_frames.pop_back();
        q_enabled = r.prev_enabled;
        auto& f = rf[static_cast<std::size_t>(r.frame)];
        if (r.frame_mode == 2) {
          --replay_depth;
          f = {};
          --outstanding;
        } else if (r.frame_mode == 1) {
          if (unwinding) {
            f = {};
            --outstanding;
          } else {
            f.phase = ref_frame::ready;
          }
        }
        break;
      }
    }
    if (unwinding) {
      try {
        struct deleter {
          any_guard* g;
          ~deleter() noexcept(false) { delete g; }
        } d{g};
        throw injected{};
      } catch (const injected&) {
      }
    } else {
      threw = throws_tequant([&] { delete g; });
    }
    if (!quiet) FZ_CHECK(threw == expect_throw);
  }

  void forward_cast(std::size_t which, float v) {
    const tequant::slot_id s = fwd[which % fwd.size()];
    if (!q_enabled) {  // high precision: no scale, no amax, no snapshot (even inside a replay)
      const tequant::cast_plan plan = m.plan_cast(s);
      FZ_CHECK(!plan.enabled && plan.amax == nullptr);
      return;
    }
    // Model: the nearest replaying frame decides; recording frames above it snapshot what is used.
    std::size_t r = open_frames.size();
    while (r > 0 && open_frames[r - 1].second != 2) --r;
    const std::uint64_t k = key(s);
    bool expect_error = false;
    float used = slots[k].scale;
    if (r > 0) {
      auto& snap = rf[static_cast<std::size_t>(open_frames[r - 1].first)].snap;
      const auto it = snap.find(k);
      if (it == snap.end()) expect_error = true;
      else used = it->second;
    }
    tequant::cast_plan plan{};
    const bool threw = strong(expect_error, [&] { plan = m.plan_cast(s); });
    FZ_CHECK(threw == expect_error);
    if (threw) return;
    FZ_CHECK(plan.enabled);
    for (std::size_t i = r; i < open_frames.size(); ++i)
      if (open_frames[i].second == 1) rf[static_cast<std::size_t>(open_frames[i].first)].snap.try_emplace(k, used);
    FZ_CHECK(tequant::detail::float_bits(*plan.scale) == tequant::detail::float_bits(used));
    FZ_CHECK((plan.amax == nullptr) == (r > 0));
    if (plan.amax != nullptr) {
      m.backend().max_accumulate(plan.amax, v);
      slots[k].staging = tequant::detail::nan_ignoring_max(slots[k].staging, v);
    }
  }

  void backward_cast(std::size_t which, float v) {
    const tequant::slot_id s = bwd[which % bwd.size()];
    const tequant::cast_plan plan = m.plan_cast(s);
    FZ_CHECK(plan.amax != nullptr);
    FZ_CHECK(tequant::detail::float_bits(*plan.scale) == tequant::detail::float_bits(slots[key(s)].scale));
    m.backend().max_accumulate(plan.amax, v);
    auto& st = slots[key(s)].staging;
    st = tequant::detail::nan_ignoring_max(st, v);
  }

  bool model_request() {  // returns whether the manager must throw
    if (scope_depth != 0) {
      pending = true;
      return false;
    }
    if (scoped) return true;
    if (owner_rule) return false;  // without a ticket TE's old modules do nothing
    pending = true;
    if (!rt.empty() && (!full || rt.size() == 1)) rt.front().requested = true;
    (void)model_queue();
    return false;
  }

  bool model_ticket_request(tequant::backward_ticket t, bool& flush_throws) {
    if (!owner_rule) return model_request();
    if (scope_depth != 0) {
      pending = true;
    } else if (t.owner) {
      pending = true;
      model_flush(flush_throws);
    }
    return flush_throws;
  }

  void check() {
    const auto st = m.stats();
    FZ_CHECK(st.autocast_depth == autocast_depth);
    FZ_CHECK(st.scope_depth == scope_depth);
    FZ_CHECK(st.checkpoint_depth == open_frames.size());
    FZ_CHECK(st.outstanding_snapshots == outstanding);
    FZ_CHECK(st.pending == pending);
    FZ_CHECK(st.forward_updates == fwd_updates);
    FZ_CHECK(st.backward_updates == bwd_updates);
    FZ_CHECK(m.grad_enabled() == grad);
    FZ_CHECK(m.quantization_enabled() == q_enabled);
    FZ_CHECK(m.in_replay() == (replay_depth != 0));
    {
      std::lock_guard<std::mutex> lock(tasks.mutex);
      FZ_CHECK(tasks.tasks.size() == rt.size());
      for (std::size_t i = 0; i < rt.size(); ++i) FZ_CHECK(tasks.tasks[i].size() == rt[i].callbacks);
    }
    for (std::size_t i = 0; i < frames.size(); ++i) {
      FZ_CHECK(frames[i].has_snapshot() == (rf[i].phase != ref_frame::idle));
      FZ_CHECK(frames[i].snapshot_slots() == rf[i].snap.size());
    }
    for (auto list : {&fwd, &bwd})
      for (auto s : *list) {
        const auto& r = slots[key(s)];
        FZ_CHECK(tequant::detail::float_bits(m.staging_amax(s)) == tequant::detail::float_bits(r.staging));
        FZ_CHECK(tequant::detail::float_bits(m.scale(s)) == tequant::detail::float_bits(r.scale));
      }
  }

  void save_load(std::uint8_t arg) {
    const auto bytes = tequant::state_bytes(m);
    const bool busy = autocast_depth != 0 || scope_depth != 0 || !open_frames.empty() || outstanding != 0;
    auto bad = bytes;
    bad[static_cast<std::size_t>(arg) * 131 % bad.size()] ^= static_cast<std::uint8_t>(1u << (arg % 8));
    FZ_CHECK(throws_tequant([&] { tequant::load_state(m, bad); }));
    FZ_CHECK(throws_tequant([&] { tequant::load_state(m, bytes); }) == busy);
    FZ_CHECK(tequant::state_bytes(m) == bytes);
    // A fresh manager adopts everything and writes the same bytes.
    bool no_fail = false;
    manager fresh(params(), Boundary{}, fuzz_comm{&no_fail});  // (hooked: hooks without an engine)
    tequant::load_state(fresh, bytes);
    FZ_CHECK(tequant::state_bytes(fresh) == bytes);
  }

  void threads(std::uint8_t arg) {
    const int n = 2 + arg % 3;
    const bool expect_throw = model_request();
    std::vector<std::thread> ts;
    std::array<int, 4> errors{};
    for (int t = 0; t < n; ++t)
      ts.emplace_back([&, t] {
        for (int i = 0; i < 20; ++i) {
          if (throws_tequant([&] { m.request_backward_update(); })) ++errors[static_cast<std::size_t>(t)];
          (void)m.plan_cast(bwd[static_cast<std::size_t>(t + i) % bwd.size()]);
        }
      });
    for (auto& th : ts) th.join();
    for (int t = 0; t < n; ++t) FZ_CHECK(errors[static_cast<std::size_t>(t)] == (expect_throw ? 20 : 0));
  }

  static constexpr int ops = 20;

  void event(std::uint8_t op, std::uint8_t arg) {
    if (std::getenv("TEQUANT_FUZZ_TRACE") != nullptr) std::fprintf(stderr, "event %d arg %d\n", op % ops, arg);
    switch (op % ops) {
      case 0: {  // autocast enter
        const bool en = arg & 1;
        bool expect_throw = false;
        if (autocast_depth == 0 && scope_depth == 0 && replay_depth == 0 && !(hooked && !rt.empty())) {
          if (recover) {  // first the update of a logical backward that raised, whatever the policy
            model_flush(expect_throw);
            if (!expect_throw) recover = false;
          }
          if (entry_flush && !expect_throw) {
            if (hooked) {
              FZ_CHECK(cb_task < 0);  // no task is running
              cb_flag = false;        // any task the flag named has ended
            }
            model_flush(expect_throw);
          }
        }
        any_guard* g = nullptr;
        const bool threw =
            strong(expect_throw, [&] { g = new boxed<typename manager::autocast_region>(m.autocast(en), 0); });
        FZ_CHECK(threw == expect_throw);
        if (threw) break;
        push(g);
        rg.push_back({0, en, q_enabled, grad, -1, 0, owner});
        if (owner_rule && autocast_depth == 0) owner = true;  // TE: reset at every depth-0 entry
        q_enabled = en;
        ++autocast_depth;
        break;
      }
      case 1:
        push(new boxed<typename manager::grad_mode_guard>(m.grad_mode(arg & 1), 1));
        rg.push_back({1, false, false, grad, -1, 0});
        grad = arg & 1;
        break;
      case 2:
        push(new boxed<typename manager::backward_scope_guard>(m.backward_scope(), 2));
        rg.push_back({2});
        if (scope_depth == 0) {
          const bool in_bwd = hooked && !rt.empty();
          if (hooked && !in_bwd) {
            FZ_CHECK(cb_task < 0);
            cb_flag = false;
          }
          pending = true;
          // Handed to the task's end: the callback is queued, or (full hooks) the task is nested.
          scope_in_bwd = in_bwd && (model_queue() || (full && rt.size() > 1));
        }
        ++scope_depth;
        break;
      case 3: {  // checkpoint forward
        const int f = arg % 3;
        const bool need = (arg & 4) == 0;
        const bool expect_error = rf[static_cast<std::size_t>(f)].phase != ref_frame::idle;
        any_guard* g = nullptr;
        const bool threw = strong(expect_error,
            [&] { g = new boxed<typename manager::frame_guard>(m.checkpoint_forward(frames[static_cast<std::size_t>(f)], need), 3); });
        FZ_CHECK(threw == expect_error);
        if (threw) break;
        push(g);
        const bool active = grad && need;
        rg.push_back({3, false, q_enabled, grad, f, active ? 1 : 0});
        open_frames.push_back({f, active ? 1 : 0});
        if (active) {
          rf[static_cast<std::size_t>(f)].phase = ref_frame::recording;
          rf[static_cast<std::size_t>(f)].enabled = q_enabled;
          ++outstanding;
        }
        break;
      }
      case 4: {  // replay
        const int f = arg % 3;
        const bool expect_error = rf[static_cast<std::size_t>(f)].phase != ref_frame::ready;
        any_guard* g = nullptr;
        const bool threw = strong(expect_error,
            [&] { g = new boxed<typename manager::frame_guard>(m.checkpoint_replay(frames[static_cast<std::size_t>(f)]), 3); });
        FZ_CHECK(threw == expect_error);
        if (threw) break;
        // Inside a task the replay queues the callback on this (outer) task before a nested backward.
        if (scope_depth == 0 && !rt.empty()) (void)model_queue();
        if (!rt.empty()) rt.back().replayed = true;
        push(g);
        rg.push_back({3, false, q_enabled, grad, f, 2});
        open_frames.push_back({f, 2});
        rf[static_cast<std::size_t>(f)].phase = ref_frame::replaying;
        q_enabled = rf[static_cast<std::size_t>(f)].enabled;  // the replay casts as its forward did
        ++replay_depth;
        break;
      }
      case 5: pop(false); break;
      case 6: pop(true); break;
      case 7: forward_cast(arg >> 3, values[arg & 7]); break;
      case 8: backward_cast(arg >> 3, values[arg & 7]); break;
      case 9: {
        const bool expect = model_request();
        FZ_CHECK(strong(expect, [&] { m.request_backward_update(); }) == expect);
        break;
      }
      case 10: {
        bool expect = false;
        model_flush(expect);
        FZ_CHECK(strong(expect, [&] { m.flush_backward_update(); }) == expect);
        break;
      }
      case 11: threads(arg); break;
      case 12: fail_next = model_fail_next = true; break;
      case 13: save_load(arg); break;
      case 14: {
        // engine_callback refuses deferral inside a task outside a scope (the task's end would flush
        // first); any error drops what was registered.
        const bool refuse = hooked && scope_depth == 0 && !rt.empty();
        FZ_CHECK(throws_tequant([&] { m.defer_weight_grad([] {}); }) == refuse);
        FZ_CHECK(m.deferred_weight_grads() == (refuse ? 0u : 1u));
        const bool expect = scope_depth == 0;
        FZ_CHECK(strong(expect, [&] { m.run_deferred_weight_grads(); }) == expect);
        FZ_CHECK(m.deferred_weight_grads() == 0);
        break;
      }
      case 15: {  // module forward: returns the ticket (owner under first_module_owner)
        const auto n = static_cast<std::uint32_t>(m.module_count());
        const tequant::module_handle h{(arg & 3u) % (n + 1)};  // n: not registered
        const bool needs = (arg & 4) == 0;
        tequant::backward_ticket t{};
        const bool threw = strong(h.index >= n, [&] { t = m.module_forward(h, needs); });
        FZ_CHECK(threw == (h.index >= n));
        if (threw) break;
        bool expect_owner = false;
        if (owner_rule && q_enabled && grad && needs) {
          expect_owner = owner;
          if (replay_depth == 0) owner = false;  // inside a replay TE restores it (bug A)
        }
        FZ_CHECK(t.owner == expect_owner);
        tickets[(arg >> 3) & 3] = t;
        break;
      }
      case 16: {  // a module backward's request with its ticket (the owner flushes under first_module_owner)
        const tequant::backward_ticket t = tickets[arg & 3];
        bool flush_throws = false;
        const bool expect = model_ticket_request(t, flush_throws);
        // (Not strong: an owner's failed flush leaves the request's own effect, the pending update.)
        FZ_CHECK(throws_tequant([&] { m.request_backward_update(t); }) == expect);
        break;
      }
      case 17:  // the engine gains or loses final callbacks (between backwards only)
        if (rt.empty()) {
          can_queue = arg & 1;
          std::lock_guard<std::mutex> lock(tasks.mutex);
          tasks.can_queue = can_queue;
        }
        break;
      case 18: {  // a backward task starts; nested only after a replay in the current task (the contract)
        if (!full && !rt.empty() && !rt.back().replayed) break;  // (minimal hooks: the contract)
        const bool nested = !rt.empty();
        {
          std::lock_guard<std::mutex> lock(tasks.mutex);
          tasks.tasks.emplace_back();
        }
        push(new any_guard{});
        rg.push_back({4});
        rt.push_back({0, false, nested, cb_flag && cb_task < 0, false});
        break;
      }
      case 19: {  // misuse of lookups and registration: an error, nothing changes
        const tequant::slot_id bad{tequant::direction::forward, 0, 1000u + arg};
        switch (arg % 5) {
          case 0: FZ_CHECK(strong(true, [&] { (void)m.plan_cast(bad); })); break;
          case 1: FZ_CHECK(strong(true, [&] { (void)m.slot(tequant::module_handle{0}, tequant::forward_role::input, 7); })); break;
          case 2: FZ_CHECK(strong(true, [&] { (void)m.bucket(1000); })); break;
          case 3: FZ_CHECK(strong(true, [&] { (void)m.register_module("bad", 0); })); break;
          case 4: FZ_CHECK(strong(true, [&] { (void)m.scale(tequant::slot_id{tequant::direction::backward, 0, 0}); })); break;
        }
        break;
      }
    }
    check();
  }
};

template <class Boundary>
void run(const std::uint8_t* data, std::size_t size) {
  harness<Boundary> h(data[1]);
  h.check();
  for (std::size_t i = 2; i + 1 < size && i < 2 + 2 * 256; i += 2) h.event(data[i], data[i + 1]);
  while (!h.guards.empty()) {
    h.pop(false);
    h.check();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  // (data[0] % 4 as before the full hooks existed, so that the committed seeds keep their meaning.)
  switch (data[0] % 4) {
    case 0: run<tequant::autocast_entry>(data, size); break;
    case 1: run<tequant::explicit_scope>(data, size); break;
    case 2:
      if (data[0] & 4)
        run<full_hooked_boundary>(data, size);
      else
        run<hooked_boundary>(data, size);
      break;
    default: run<tequant::first_module_owner>(data, size); break;
  }
  return 0;
}
