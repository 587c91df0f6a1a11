#include <catch2/catch.hpp>

#include "examples/mlp.hpp"

TEST_CASE("example: the MLP trained with SGD halves its loss (fixed seed)", "[runtime][example]") {
  const mlp::Result r = mlp::train(/*seed=*/42, /*steps=*/100);
  INFO("loss " << r.first_loss << " -> " << r.last_loss);
  CHECK(r.last_loss <= r.first_loss / 2);
  CHECK(r.peak_bytes > 0);
  CHECK(r.peak_bytes < r.intermediate_bytes);
  CHECK(r.in_place_updates == 4);  // W1, b1, W2, b2: no weight is copied or reallocated
  WARN("MLP training step: peak " << r.peak_bytes << " bytes vs " << r.intermediate_bytes
                                  << " bytes of intermediates without reuse");
}
