#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>

using namespace convgraph;

TEST_CASE("graph: variables carry types, names and history", "[core][graph]") {
  Var x = input(DType::float32, {kUnknown, 3}, "x");
  CHECK(x.is_input());
  CHECK(x.type().to_string() == "float32(?, 3)");
  Var y = (x * 2.0).named("double");
  CHECK(y.op()->name() == "mul");
  CHECK(y.name() == "double");
  CHECK(y.inputs().size() == 2);
  CHECK(y.shape() == Shape{kUnknown, 3});
  Var c = constant(Tensor::from({1, 2, 3}, {3}));
  CHECK(c.is_constant());
  CHECK((x + c).shape() == Shape{kUnknown, 3});
  const auto order = topological_order({y + c});
  CHECK(order.front().same(x));
  CHECK(order.back().op()->name() == "add");
}

TEST_CASE("graph: broadcasting shape inference with unknown dims", "[core][graph]") {
  Var a = input(DType::float32, {4, 1, 5});
  Var b = input(DType::float32, {3, 1});
  CHECK((a + b).shape() == Shape{4, 3, 5});
  Var u = input(DType::float32, {kUnknown, 5});
  CHECK((u * input(DType::float32, {7, 1})).shape() == Shape{7, 5});
  CHECK_THROWS_AS(a + input(DType::float32, {4, 2, 6}), ShapeError);
  CHECK_THROWS_WITH(a + input(DType::float32, {4, 2, 6}), Catch::Contains("add") && Catch::Contains("(4, 2, 6)"));
}

TEST_CASE("graph: ops compare by name and parameters", "[core][graph]") {
  Var x = input(DType::float32, {2, 3});
  Var s1 = sum(x, {1});
  Var s2 = sum(x, {-1});
  Var s3 = sum(x, {0});
  CHECK(s1.op()->equals(*s2.op()));
  CHECK(s1.op()->hash() == s2.op()->hash());
  CHECK_FALSE(s1.op()->equals(*s3.op()));
}

TEST_CASE("graph: dtype promotion inserts casts", "[core][graph]") {
  Var f = input(DType::float32, {2});
  Var d = input(DType::float64, {2});
  Var i = input(DType::int32, {2});
  CHECK((f + d).dtype() == DType::float64);
  CHECK((f + i).dtype() == DType::float32);
  CHECK((i / i).dtype() == DType::float64);
  CHECK((f * 3.0).dtype() == DType::float32);
  CHECK((f < d).dtype() == DType::boolean);
}

TEST_CASE("function graph: clone, replace with type check", "[core][graph]") {
  Var x = input(DType::float32, {2}, "x");
  Var y = exp(x) + 1.0;
  FunctionGraph fg({x}, {y});
  CHECK_FALSE(fg.outputs()[0].same(y));  // a private clone
  const Var ex = fg.outputs()[0].inputs()[0];
  CHECK(ex.op()->name() == "exp");
  CHECK(fg.clients(ex).size() == 1);
  fg.replace(ex, fg.inputs()[0] * 2.0, "test");
  CHECK(fg.outputs()[0].inputs()[0].op()->name() == "mul");
  CHECK_THROWS_AS(fg.replace(fg.inputs()[0], input(DType::float64, {2}), "bad"), TypeError);
  CHECK_THROWS_AS(FunctionGraph({}, {y}), ValueError);   // x missing from the inputs
  CHECK_THROWS_AS(FunctionGraph({y}, {y}), ValueError);  // not a graph input
  CHECK_THROWS_AS(FunctionGraph({x, x}, {y}), ValueError);
}

TEST_CASE("printing: debugprint and DOT show ops, names and shared nodes", "[core][print]") {
  Var x = input(DType::float32, {2, 2}, "x");
  Var e = exp(x).named("e");
  Var y = e * e;
  const std::string text = debugprint(y);
  CHECK_THAT(text, Catch::Contains("mul"));
  CHECK_THAT(text, Catch::Contains("exp 'e'"));
  CHECK_THAT(text, Catch::Contains("printed above"));
  const std::string dot = to_dot({y});
  CHECK_THAT(dot, Catch::StartsWith("digraph convgraph {"));
  CHECK_THAT(dot, Catch::Contains("->"));
  CHECK_THAT(dot, Catch::Contains("'e'"));
}
