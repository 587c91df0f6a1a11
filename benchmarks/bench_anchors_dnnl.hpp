#pragma once
/// The oneDNN side of convgraph-anchors: one convolution primitive (convolution_auto, fp32)
/// for a convgraph problem, bound to plain NCHW user memories, with the reorders to and from
/// the layout oneDNN prefers. Benchmark-only: nothing in the library includes oneDNN.
#include <oneapi/dnnl/dnnl.hpp>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "benchmarks/bench_common.hpp"

namespace convgraph::bench {

/// The inputs wrap the workload's buffers (the same data convgraph reads); the output is
/// oneDNN's own buffer, so both results can be compared.
class DnnlConv {
 public:
  explicit DnnlConv(const Workload& wl);
  /// One call as a user holding NCHW tensors makes it: reorders in, convolution, reorder out.
  void run_with_reorders();
  /// The primitive alone, on operands already in its layout (run_with_reorders() once first).
  void run_conv_only();
  const float* output() const { return out_.data; }
  const std::string& impl() const { return impl_; }  ///< e.g. "jit:avx512_core"
  int reorders() const;  ///< operands whose layout differs from NCHW

 private:
  struct Bind {
    dnnl::memory user, prim;
    std::optional<dnnl::reorder> reorder;
    bool output = false;
  };
  void bind(int arg, const dnnl::memory::desc& user_md, const dnnl::memory::desc& prim_md, float* data,
            bool output);

  dnnl::engine eng_;
  dnnl::stream strm_;
  dnnl::primitive conv_;
  std::vector<Bind> binds_;
  std::unordered_map<int, dnnl::memory> args_;
  Buffer out_;
  std::string impl_;
};

/// "2.6.3"
std::string dnnl_version_text();

}  // namespace convgraph::bench
