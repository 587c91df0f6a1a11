// The profile's Chrome trace is valid JSON whatever the node names hold: read back with a
// JSON parser, every event matches the profile's node, op and implementation.
#include <catch2/catch.hpp>
#include <convgraph/convgraph.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

using namespace convgraph;

TEST_CASE("profile: the Chrome trace parses as JSON with hostile node names", "[runtime][profile][json]") {
  const std::vector<std::string> names = {
      "quote \" and \\ backslash",  "new\nline\r\n", "tab\there", "<tag>&amp;",
      "\xc3\xbc \xe6\xbc\xa2 \xf0\x9f\x98\x80", "ctl \x01\x1f end", "\\u0000 not an escape",
  };
  Var x = input(DType::float32, {1, 2, 6, 6}, "x\t\"in\"");
  Var w = input(DType::float32, {3, 2, 3, 3}, "w");
  Var y = conv2d(x, w, {.border_mode = "half", .name = "conv \"1\"\n\\"});
  for (const auto& n : names) y = exp(y * 0.5).named(n);
  Var bad = relu(y).named("bad utf-8 \xff\xfe");  // not UTF-8: replaced, never invalid JSON
  // Without elementwise fusion every named node keeps its own event.
  Function f = compile({x, w}, {sum(bad)}, Mode::fast_run().with_flags("profile=True,optimizer_excluding=elemwise_fusion"));
  for (int i = 0; i < 2; ++i)
    (void)f({Tensor::full(DType::float32, {1, 2, 6, 6}, 0.1), Tensor::full(DType::float32, {3, 2, 3, 3}, 0.2)});

  const ProfileStats p = f.profile();
  nlohmann::json trace;
  REQUIRE_NOTHROW(trace = nlohmann::json::parse(p.chrome_trace));
  const auto& events = trace.at("traceEvents");
  REQUIRE(events.is_array());
  REQUIRE(events.size() == p.nodes.size());
  double previous_end = 0;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const auto& e = events[i];
    const NodeProfile& n = p.nodes[i];
    INFO("event " << i << ": " << e.dump());
    CHECK(e.at("ph") == "X");
    CHECK(e.at("name").get<std::string>() == n.op);
    CHECK(e.at("cat").get<std::string>() == (n.implementation.empty() ? "op" : n.implementation));
    const std::string node = e.at("args").at("node").get<std::string>();
    if (n.node.find('\xff') == std::string::npos) CHECK(node == n.node);
    else CHECK_THAT(node, Catch::Contains("bad utf-8 \xef\xbf\xbd"));  // U+FFFD
    // Events of one call follow the schedule on one thread: they do not overlap.
    const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
    CHECK(ts >= previous_end - 1e-3);
    CHECK(dur >= 0);
    previous_end = ts + dur;
  }
  // Every hostile name came through: the labels hold the names exactly.
  for (const auto& name : names) {
    bool found = false;
    for (const auto& e : events) found = found || e["args"]["node"].get<std::string>().find(name) != std::string::npos;
    INFO("name " << name);
    CHECK(found);
  }
}
