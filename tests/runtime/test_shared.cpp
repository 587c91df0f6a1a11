// Shared variables and updates: values read at each call, updates applied after it (from
// the values before it), in place when safe, under the optimizer passes and from threads.
#include <atomic>
#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>
#include <thread>

using namespace convgraph;

namespace {

Tensor iota(std::int64_t n, double start = 0, double step = 1, DType dt = DType::float32) {
  Tensor t(dt, {n});
  for (std::int64_t i = 0; i < n; ++i) t.set(i, start + step * static_cast<double>(i));
  return t;
}

std::vector<Mode> modes() {
  return {Mode::fast_run(), Mode::fast_compile(), Mode::fast_run().excluding("fusion"), Mode::debug_mode()};
}

}  // namespace

TEST_CASE("shared: get_value copies or borrows, set_value checks the type and copies", "[runtime][shared]") {
  SharedVar w = shared(Tensor::from({1, 2, 3}, {3}), "w");
  CHECK(w.is_shared());
  CHECK_FALSE(w.is_input());
  CHECK(w.type().to_string() == "float32(3,)");
  Tensor copy = w.get_value();
  copy.set(0, 100);
  CHECK(w.get_value().to_vector() == std::vector<double>{1, 2, 3});
  CHECK(w.get_value(/*borrow=*/true).storage() == w.get_value(true).storage());
  CHECK(w.get_value().storage() != w.get_value(true).storage());

  Tensor v = Tensor::from({4, 5, 6}, {3});
  w.set_value(v);
  v.set(0, -1);  // copied: the variable does not see it
  CHECK(w.get_value().to_vector() == std::vector<double>{4, 5, 6});
  w.set_value(v, /*borrow=*/true);
  CHECK(w.get_value(true).storage() == v.storage());

  CHECK_THROWS_AS(w.set_value(Tensor::from({1, 2, 3}, {3}, DType::float64)), TypeError);
  CHECK_THROWS_WITH(w.set_value(Tensor::from({1, 2, 3}, {3}, DType::float64)),
                    Catch::Contains("'w'") && Catch::Contains("float64(3,)") && Catch::Contains("float32(3,)"));
  CHECK_THROWS_AS(w.set_value(Tensor::from({1, 2}, {2})), ShapeError);
  CHECK_THROWS_WITH(w.set_value(Tensor::from({1, 2, 3}, {1, 3})), Catch::Contains("'w'") && Catch::Contains("(1, 3)"));
  CHECK_THROWS_AS(w.set_value(Tensor()), ValueError);
  CHECK_THROWS_AS(shared(Tensor(), "u"), ValueError);
  CHECK_THROWS_AS(SharedVar(input(DType::float32, {3}, "x")), ValueError);
  CHECK_THROWS_AS(SharedVar().get_value(), ValueError);
  // A non-contiguous tensor is stored contiguous.
  SharedVar m = shared(Tensor::from({1, 2, 3, 4}, {2, 2}).permute({1, 0}), "m");
  CHECK(m.get_value(true).is_contiguous());
  CHECK(m.get_value().to_vector() == std::vector<double>{1, 3, 2, 4});
  CHECK_THAT(debugprint(m * 2.0), Catch::Contains("Shared 'm'"));
}

TEST_CASE("shared: an implicit input, never folded or merged: set_value takes effect", "[runtime][shared]") {
  for (const Mode& mode : modes()) {
    SharedVar a = shared(Tensor::from({1, 2}, {2}), "a");
    SharedVar b = shared(Tensor::from({1, 2}, {2}), "b");  // equal to a: merge must keep both
    Var x = input(DType::float32, {2}, "x");
    // Without graph inputs, the whole graph would fold if shared variables were constants.
    Function f = compile({}, {a * 10.0 - b, exp(a * 0.0)}, mode);
    Function g = compile({x}, {x + a}, mode);
    CHECK(f({})[0].to_vector() == std::vector<double>{9, 18});
    a.set_value(Tensor::from({3, 4}, {2}));
    CHECK(f({})[0].to_vector() == std::vector<double>{29, 38});
    CHECK(g({Tensor::from({1, 1}, {2})})[0].to_vector() == std::vector<double>{4, 5});
    // The compiled graph holds the same cell: the Function's clone is not a copy.
    for (const Var& v : f.graph().toposort())
      if (v.is_shared()) CHECK((v.node()->shared == a.node()->shared || v.node()->shared == b.node()->shared));
  }
}

TEST_CASE("shared: a shared variable passed as an input is a ValueError", "[runtime][shared]") {
  SharedVar w = shared(Tensor::from({1}, {1}), "w");
  CHECK_THROWS_AS(compile({w}, {w * 2.0}), ValueError);
  CHECK_THROWS_WITH(compile({w}, {w * 2.0}), Catch::Contains("'w'") && Catch::Contains("shared variable"));
}

TEST_CASE("updates: a counter; outputs see the values before the call", "[runtime][shared]") {
  for (const Mode& mode : modes()) {
    SharedVar c = shared(Tensor::scalar(0, DType::int64), "c");
    Function f = compile({}, {c, c * 2}, mode, {{c, c + 1}});
    for (int i = 0; i < 4; ++i) {
      auto out = f({});
      CHECK(out[0].get(0) == i);
      CHECK(out[1].get(0) == 2 * i);
    }
    CHECK(c.get_value().get(0) == 4);
    c.set_value(Tensor::scalar(10, DType::int64));
    CHECK(f({})[0].get(0) == 10);
    CHECK(c.get_value().get(0) == 11);
  }
}

TEST_CASE("updates: {a: b, b: a} swaps; a rotation of three too", "[runtime][shared]") {
  for (const Mode& mode : modes()) {
    SharedVar a = shared(Tensor::from({1, 2}, {2}), "a"), b = shared(Tensor::from({3, 4}, {2}), "b");
    SharedVar c = shared(Tensor::from({5, 6}, {2}), "c");
    Function swap = compile({}, {}, mode, {{a, b}, {b, a}});
    swap({});
    CHECK(a.get_value().to_vector() == std::vector<double>{3, 4});
    CHECK(b.get_value().to_vector() == std::vector<double>{1, 2});
    // No aliasing left behind: changing one later leaves the other.
    Function bump = compile({}, {}, mode, {{a, a + 1.0}});
    bump({});
    CHECK(b.get_value().to_vector() == std::vector<double>{1, 2});
    Function rotate = compile({}, {}, mode, {{a, b * 1.0}, {b, c + 0.0}, {c, a * 1.0}});
    rotate({});
    CHECK(a.get_value().to_vector() == std::vector<double>{1, 2});
    CHECK(b.get_value().to_vector() == std::vector<double>{5, 6});
    CHECK(c.get_value().to_vector() == std::vector<double>{4, 5});
  }
}

TEST_CASE("updates: in place keeps the storage; unsafe cases swap and stay correct", "[runtime][shared]") {
  const std::int64_t n = 4096;
  for (const Mode& mode : modes()) {
    INFO("mode " << (mode.optimizer) << " fusion excluded " << mode.exclude_tags.size());
    Var x = input(DType::float32, {n}, "x");
    SharedVar w = shared(iota(n), "w");
    SharedVar v = shared(iota(n, 1000), "v");
    // w's update is its last reader: computed into w's storage.
    Function f = compile({x}, {sum(w)}, mode, {{w, w - x * 0.5}});
    const void* storage = w.get_value(true).raw();
    CHECK_THAT(f.describe(), Catch::Contains("update 'w'") && Catch::Contains("[in place]"));
    for (int step = 1; step <= 3; ++step) {
      auto out = f({Tensor::full(DType::float32, {n}, 2)});
      CHECK(out[0].get(0) == Approx(n * (n - 1) / 2.0 - (step - 1) * n));  // the sum before the step
      CHECK(w.get_value(true).raw() == storage);
    }
    CHECK(w.get_value().get(7) == 7 - 3);

    // v reads w after w's update node: w must not be overwritten early, so it swaps.
    Function g = compile({}, {}, mode, {{w, w * 2.0}, {v, v + w}});
    CHECK_THAT(g.describe(), Catch::Contains("update 'w'") && Catch::Contains("[swap]"));
    const Tensor w0 = w.get_value(), v0 = v.get_value();
    g({});
    CHECK(w.get_value(true).raw() != storage);
    for (std::int64_t i : {std::int64_t{0}, std::int64_t{1}, std::int64_t{100}, n - 1}) {
      CHECK(w.get_value().get(i) == 2 * w0.get(i));
      CHECK(v.get_value().get(i) == v0.get(i) + w0.get(i));
    }

    // The variable is also an output: the caller gets the value before the update.
    Function h = compile({}, {w}, mode, {{w, w + 1.0}});
    const Tensor before = w.get_value();
    const Tensor out = h({})[0];
    CHECK(max_abs_diff(out, before) == 0);
    CHECK(w.get_value().get(5) == before.get(5) + 1);

    // The update value is also an output: the caller's tensor and the variable never alias.
    const Var next = w + 1.0;
    Function k = compile({}, {next}, mode, {{w, next}});
    CHECK_THAT(k.describe(), Catch::Contains("[copy]"));
    const Tensor first = k({})[0];
    const Tensor again = first.clone();
    (void)k({});
    CHECK(max_abs_diff(first, again) == 0);
    CHECK(w.get_value().get(5) == again.get(5) + 1);
  }
}

TEST_CASE("updates: inputs and constants as values are copied, never aliased", "[runtime][shared]") {
  for (const Mode& mode : modes()) {
    Var x = input(DType::float32, {3}, "x");
    SharedVar w = shared(Tensor::from({0, 0, 0}, {3}), "w");
    Function from_input = compile({x}, {}, mode, {{w, x}});
    Tensor arg = Tensor::from({1, 2, 3}, {3});
    from_input({arg});
    arg.set(0, 99);
    CHECK(w.get_value().to_vector() == std::vector<double>{1, 2, 3});
    // A constant value, then an in-place update of the same variable: the constant stays.
    Function reset = compile({}, {}, mode, {{w, constant(Tensor::from({7, 7, 7}, {3}))}});
    Function bump = compile({}, {}, mode, {{w, w + 1.0}});
    for (int i = 0; i < 2; ++i) {
      reset({});
      CHECK(w.get_value().to_vector() == std::vector<double>{7, 7, 7});
      bump({});
      CHECK(w.get_value().to_vector() == std::vector<double>{8, 8, 8});
    }
    // Two variables updated with one value: each gets its own tensor.
    SharedVar u = shared(Tensor::from({0, 0, 0}, {3}), "u");
    Function both = compile({x}, {}, mode, {{w, x * 2.0}, {u, x * 2.0}});
    both({Tensor::from({1, 2, 3}, {3})});
    CHECK(w.get_value(true).storage() != u.get_value(true).storage());
    bump({});
    CHECK(u.get_value().to_vector() == std::vector<double>{2, 4, 6});
  }
}

TEST_CASE("updates: checks name the variable and both types", "[runtime][shared]") {
  SharedVar w = shared(Tensor::from({1, 2, 3}, {3}), "w");
  Var x = input(DType::float32, {kUnknown}, "x");
  Var x64 = input(DType::float64, {3}, "x64");
  CHECK_THROWS_AS(compile({x64}, {}, Mode::fast_run(), {{w, x64}}), TypeError);
  CHECK_THROWS_WITH(compile({x64}, {}, Mode::fast_run(), {{w, x64}}),
                    Catch::Contains("'w'") && Catch::Contains("float64(3,)") && Catch::Contains("float32(3,)"));
  CHECK_THROWS_AS(compile({}, {}, Mode::fast_run(), {{w, reshape(w, {1, 3})}}), ShapeError);
  CHECK_THROWS_WITH(compile({}, {}, Mode::fast_run(), {{w, reshape(w, {1, 3})}}), Catch::Contains("float32(1, 3)"));
  CHECK_THROWS_AS(compile({}, {}, Mode::fast_run(), {{w, w + 1.0}, {w, w * 2.0}}), ValueError);
  CHECK_THROWS_WITH(compile({}, {}, Mode::fast_run(), {{w, w + 1.0}, {w, w * 2.0}}), Catch::Contains("twice"));
  CHECK_THROWS_AS(compile({}, {}, Mode::fast_run(), {{w, Var()}}), ValueError);
  CHECK_THROWS_AS(compile({}, {}, Mode::fast_run(), {{SharedVar(), w + 1.0}}), ValueError);
  // Unknown dimensions are checked at the call, before anything is stored.
  SharedVar u = shared(Tensor::from({5, 5, 5}, {3}), "u");
  Function f = compile({x}, {}, Mode::fast_run(), {{u, u + 1.0}, {w, x * 1.0}});
  CHECK_THROWS_AS(f({Tensor::from({1, 2}, {2})}), ShapeError);
  CHECK_THROWS_WITH(f({Tensor::from({1, 2}, {2})}), Catch::Contains("'w'") && Catch::Contains("float32(2,)"));
  CHECK(w.get_value().to_vector() == std::vector<double>{1, 2, 3});
  CHECK(u.get_value().to_vector() == std::vector<double>{5, 5, 5});
  f({Tensor::from({4, 5, 6}, {3})});
  CHECK(w.get_value().to_vector() == std::vector<double>{4, 5, 6});
  CHECK(u.get_value().to_vector() == std::vector<double>{6, 6, 6});
}

TEST_CASE("updates: a variable the graph does not read; gradients w.r.t. shared variables", "[runtime][shared]") {
  Var x = input(DType::float64, {3}, "x");
  SharedVar w = shared(Tensor::from({1, -2, 3}, {3}, DType::float64), "w");
  SharedVar last = shared(Tensor::zeros(DType::float64, {3}), "last");
  Var loss = sum(square(w - x)) * 0.5;
  Function step = compile({x}, {loss}, Mode::fast_run(), {{w, w - grad(loss, w) * 0.25}, {last, x * 1.0}});
  const Tensor target = Tensor::from({0.5, 0.5, 0.5}, {3}, DType::float64);
  double prev = step({target})[0].get(0);
  for (int i = 0; i < 20; ++i) {
    const double l = step({target})[0].get(0);
    CHECK(l == Approx(prev * 0.75 * 0.75));  // each step shrinks w - x by 3/4
    prev = l;
  }
  CHECK(last.get_value().to_vector() == target.to_vector());
}

TEST_CASE("updates: in place, the memory plan holds only the intermediates", "[runtime][shared]") {
  const std::int64_t n = 1 << 14;
  SharedVar w = shared(iota(n, 0, 1e-4), "w");
  // Unfused: mul and exp are intermediates (alive together), sub writes into w.
  Function f = compile({}, {}, Mode::fast_run().excluding("fusion"), {{w, w - exp(w * 0.5)}});
  const void* storage = w.get_value(true).raw();
  const Tensor w0 = w.get_value();
  f({});
  CHECK(w.get_value(true).raw() == storage);
  CHECK(f.total_intermediate_bytes() == 2 * n * 4);
  CHECK(f.peak_bytes() == 2 * n * 4);
  for (std::int64_t i : {std::int64_t{0}, std::int64_t{1}, n / 2, n - 1})
    CHECK(w.get_value().get(i) == Approx(w0.get(i) - std::exp(w0.get(i) * 0.5)));
  // Fused: one node, no intermediates at all.
  Function g = compile({}, {}, Mode::fast_run(), {{w, w - exp(w * 0.5)}});
  g({});
  CHECK(g.peak_bytes() == 0);
  CHECK(w.get_value(true).raw() == storage);
}

TEST_CASE("updates: calls of two Functions and get_value from threads never race", "[runtime][shared]") {
  const std::int64_t n = 1 << 12;
  constexpr int kCalls = 200;
  SharedVar w = shared(Tensor::zeros(DType::float32, {n}), "w");
  SharedVar hits = shared(Tensor::scalar(0, DType::int64), "hits");
  Function up = compile({}, {}, Mode::fast_run(), {{w, w + 1.0}, {hits, hits + 1}});
  Function up2 = compile({}, {}, Mode::fast_run(), {{w, w + 1.0}});  // in place, without `hits`
  std::atomic<bool> torn{false}, done{false};
  std::thread reader([&] {
    while (!done) {
      const Tensor t = w.get_value();
      if (t.get(0) != t.get(n - 1) || t.get(0) != t.get(n / 2)) torn = true;
    }
  });
  std::thread a([&] {
    for (int i = 0; i < kCalls; ++i) up({});
  });
  std::thread b([&] {
    for (int i = 0; i < kCalls; ++i) up2({});
  });
  a.join();
  b.join();
  done = true;
  reader.join();
  CHECK_FALSE(torn);
  CHECK(hits.get_value().get(0) == kCalls);
  const Tensor final = w.get_value();
  CHECK(final.get(0) == 2 * kCalls);
  CHECK(final.get(n - 1) == 2 * kCalls);
}
