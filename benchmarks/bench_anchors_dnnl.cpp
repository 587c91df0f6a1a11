// The oneDNN side of convgraph-anchors (see bench_anchors_dnnl.hpp).
#include "benchmarks/bench_anchors_dnnl.hpp"

#include "convgraph/core/error.hpp"

namespace convgraph::bench {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

memory::format_tag plain_tag(std::size_t rank) {
  switch (rank) {
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    default: return tag::abcdef;
  }
}

}  // namespace

DnnlConv::DnnlConv(const Workload& wl) : eng_(dnnl::engine::kind::cpu, 0), strm_(eng_) {
  const ConvProblem& p = wl.problem;
  memory::dims x{p.N, p.C}, y{p.N, p.K}, w, strides, dil, pl, pr;
  if (p.G > 1) w = {p.G, p.Kg(), p.Cg()};
  else w = {p.K, p.Cg()};
  for (int a = 0; a < p.ndim; ++a) {
    x.push_back(p.in[a]);
    y.push_back(p.out[a]);
    w.push_back(p.kernel[a]);
    strides.push_back(p.stride[a]);
    dil.push_back(p.dilation[a] - 1);  // oneDNN counts the holes
    pl.push_back(p.pad_pre[a]);
    pr.push_back(p.pad_post[a]);
  }
  const auto f32 = memory::data_type::f32;
  const memory::desc xu(x, f32, plain_tag(x.size())), wu(w, f32, plain_tag(w.size())),
      yu(y, f32, plain_tag(y.size()));
  const memory::desc xa(x, f32, tag::any), wa(w, f32, tag::any), ya(y, f32, tag::any);
  const auto algo = dnnl::algorithm::convolution_auto;
  dnnl::convolution_forward::primitive_desc fwd(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, xa, wa, ya, strides, dil, pl, pr),
      eng_);
  out_ = alloc_buffer(wl.output_size());
  float* const xo = wl.x.data;
  float* const wo = wl.w.data;
  float* const yo = wl.y.data;
  switch (p.direction) {
    case ConvDirection::forward:
      conv_ = dnnl::convolution_forward(fwd);
      bind(DNNL_ARG_SRC, xu, fwd.src_desc(), xo, false);
      bind(DNNL_ARG_WEIGHTS, wu, fwd.weights_desc(), wo, false);
      bind(DNNL_ARG_DST, yu, fwd.dst_desc(), out_.data, true);
      impl_ = fwd.impl_info_str();
      break;
    case ConvDirection::grad_inputs: {
      dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(algo, xa, wa, ya, strides, dil, pl, pr), eng_, fwd);
      conv_ = dnnl::convolution_backward_data(pd);
      bind(DNNL_ARG_DIFF_DST, yu, pd.diff_dst_desc(), yo, false);
      bind(DNNL_ARG_WEIGHTS, wu, pd.weights_desc(), wo, false);
      bind(DNNL_ARG_DIFF_SRC, xu, pd.diff_src_desc(), out_.data, true);
      impl_ = pd.impl_info_str();
      break;
    }
    case ConvDirection::grad_weights: {
      dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(algo, xa, wa, ya, strides, dil, pl, pr), eng_, fwd);
      conv_ = dnnl::convolution_backward_weights(pd);
      bind(DNNL_ARG_SRC, xu, pd.src_desc(), xo, false);
      bind(DNNL_ARG_DIFF_DST, yu, pd.diff_dst_desc(), yo, false);
      bind(DNNL_ARG_DIFF_WEIGHTS, wu, pd.diff_weights_desc(), out_.data, true);
      impl_ = pd.impl_info_str();
      break;
    }
  }
}

void DnnlConv::run_with_reorders() {
  for (auto& b : binds_)
    if (b.reorder && !b.output) b.reorder->execute(strm_, b.user, b.prim);
  conv_.execute(strm_, args_);
  for (auto& b : binds_)
    if (b.reorder && b.output) b.reorder->execute(strm_, b.prim, b.user);
  strm_.wait();
}

void DnnlConv::run_conv_only() {
  conv_.execute(strm_, args_);
  strm_.wait();
}

int DnnlConv::reorders() const {
  int n = 0;
  for (const auto& b : binds_) n += b.reorder ? 1 : 0;
  return n;
}

void DnnlConv::bind(int arg, const memory::desc& user_md, const memory::desc& prim_md, float* data, bool output) {
  Bind b;
  b.user = memory(user_md, eng_, data);
  b.output = output;
  if (prim_md != user_md) {
    b.prim = memory(prim_md, eng_);
    b.reorder = output ? dnnl::reorder(b.prim, b.user) : dnnl::reorder(b.user, b.prim);
  } else {
    b.prim = b.user;
  }
  args_[arg] = b.prim;
  binds_.push_back(std::move(b));
}

std::string dnnl_version_text() {
  const auto* v = dnnl::version();
  return msg(v->major, ".", v->minor, ".", v->patch);
}

}  // namespace convgraph::bench
