// CPU kernel of the fused elementwise op (KernelRegistry key "elementwise.fused"): runs
// the op's straight-line program (ops/fused_elementwise.hpp) in blocks of kBlock output
// elements. Each block gathers (or reads in place) its inputs, then runs every instruction
// over the whole block, so each instruction is one tight loop and the intermediates stay in
// cache instead of making a round trip through memory per op. The loops are the per-level
// kernels of backends/cpu/kernels/elementwise.cpp that the unfused ops run too, so fused
// results equal unfused ones bit for bit (a NaN only as a class: the sign and payload of a
// NaN made by arithmetic are unspecified).
#include <algorithm>
#include <cstring>
#include <memory>

#include "backends/cpu/kernels_cpu.hpp"
#include "convgraph/backends/kernel_registry.hpp"
#include "ops/broadcast_iter.hpp"
#include "ops/fused_elementwise.hpp"
#include "ops/kernel_util.hpp"

namespace convgraph {

namespace {

using detail::FusedInstr;
using detail::FusedProgram;

constexpr std::int64_t kBlock = 512;          // output elements per block (registers fit in L1/L2)
constexpr std::int64_t kTaskElems = 1 << 14;  // elements per parallel task at least

template <class T>
void splat(void* dst, double v, std::int64_t n) {
  T* d = static_cast<T*>(dst);
  const T t = static_cast<T>(v);
  for (std::int64_t i = 0; i < n; ++i) d[i] = t;
}

// Typed copies: a memcpy of a run-time size per element was a call per element.
template <class U>
void splat_as(void* dst, const void* src, std::int64_t n) {
  U v;
  std::memcpy(&v, src, sizeof v);
  U* d = static_cast<U*>(dst);
  for (std::int64_t i = 0; i < n; ++i) d[i] = v;
}

void splat_bytes(void* dst, const void* src, std::size_t esize, std::int64_t n) {
  if (esize == 4) splat_as<std::uint32_t>(dst, src, n);
  else if (esize == 8) splat_as<std::uint64_t>(dst, src, n);
  else splat_as<std::uint8_t>(dst, src, n);
}

template <class U>
void strided_as(void* dst, const void* src, std::int64_t st, std::int64_t n) {
  U* d = static_cast<U*>(dst);
  const U* s = static_cast<const U*>(src);
  for (std::int64_t i = 0; i < n; ++i) d[i] = s[i * st];
}

// How one input reaches a block: read in place (same shape as the output), one value
// splatted once per task, or gathered through broadcast strides.
struct InputPlan {
  enum class Mode { direct, scalar, gather } mode = Mode::direct;
  const unsigned char* base = nullptr;
  std::size_t esize = 0;
  Shape dims;                         // the output's axes, neighbours this input walks as one merged
  std::vector<std::int64_t> strides;  // per axis of dims, in elements
};

// Merges neighbouring output axes that the input walks as one (both broadcast, or
// contiguous), so a per-channel operand of NCHW is runs of H*W splats, not runs of W.
void merge_axes(InputPlan& p, const Shape& os, const std::vector<std::int64_t>& st) {
  p.dims.clear();
  p.strides.clear();
  for (std::size_t a = 0; a < os.size(); ++a) {
    if (os[a] == 1) continue;
    if (!p.dims.empty() && p.strides.back() == st[a] * os[a]) {
      p.dims.back() *= os[a];
      p.strides.back() = st[a];
      continue;
    }
    p.dims.push_back(os[a]);
    p.strides.push_back(st[a]);
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    p.strides.push_back(0);
  }
}

// Copies output positions [s, s + n) of a broadcast input into dst, one run along the
// last axis at a time.
void gather(const InputPlan& in, std::int64_t s, std::int64_t n, unsigned char* dst, std::vector<std::int64_t>& idx) {
  const Shape& os = in.dims;
  const std::size_t r = os.size();
  const std::size_t es = in.esize;
  idx.assign(r, 0);
  std::int64_t off = 0;
  for (std::size_t a = r, rest = static_cast<std::size_t>(s); a-- > 0;) {
    idx[a] = static_cast<std::int64_t>(rest) % os[a];
    rest /= static_cast<std::size_t>(os[a]);
    off += idx[a] * in.strides[a];
  }
  const std::int64_t w = os[r - 1], st = in.strides[r - 1];
  std::int64_t done = 0;
  while (done < n) {
    const std::int64_t run = std::min(n - done, w - idx[r - 1]);
    unsigned char* d = dst + done * static_cast<std::int64_t>(es);
    const unsigned char* src = in.base + off * static_cast<std::int64_t>(es);
    if (st == 0) splat_bytes(d, src, es, run);
    else if (st == 1) std::memcpy(d, src, static_cast<std::size_t>(run) * es);
    else if (es == 4) strided_as<std::uint32_t>(d, src, st, run);
    else if (es == 8) strided_as<std::uint64_t>(d, src, st, run);
    else strided_as<std::uint8_t>(d, src, st, run);
    done += run;
    idx[r - 1] += run;
    off += run * st;
    if (idx[r - 1] < w) continue;
    off -= w * st;  // carry into the outer axes
    idx[r - 1] = 0;
    for (std::size_t a = r - 1; a-- > 0;) {
      off += in.strides[a];
      if (++idx[a] < os[a]) break;
      off -= os[a] * in.strides[a];
      idx[a] = 0;
    }
  }
}


void run_instr(const FusedProgram& prog, const FusedInstr& ins, const std::vector<const void*>& reg, void* dst,
               std::int64_t n) {
  const void* a = reg[static_cast<std::size_t>(ins.a)];
  const bool f64 = prog.reg_dtype(ins.code == FusedInstr::Code::where ? ins.b : ins.a) == DType::float64;
  const DType t = f64 ? DType::float64 : DType::float32;
  switch (ins.code) {
    case FusedInstr::Code::unary:
      CONVGRAPH_ISA_CALL(ew_unary, ins.unary, t, a, dst, n, ins.param[0], ins.param[1]);
      break;
    case FusedInstr::Code::binary:
      CONVGRAPH_ISA_CALL(ew_binary, ins.binary, t, a, true, reg[static_cast<std::size_t>(ins.b)], true, dst, n);
      break;
    case FusedInstr::Code::where:
      CONVGRAPH_ISA_CALL(ew_select, static_cast<const bool*>(a), reg[static_cast<std::size_t>(ins.b)],
                         reg[static_cast<std::size_t>(ins.c)], dst, n, f64);
      break;
    case FusedInstr::Code::cast:
      if (f64 != (ins.dtype == DType::float64)) CONVGRAPH_ISA_CALL(ew_float_convert, a, f64, dst, n);
      else std::memcpy(dst, a, static_cast<std::size_t>(n) * dtype_size(ins.dtype));
      break;
    case FusedInstr::Code::constant: break;
  }
}

void run_fused(const Op& op, const std::vector<Tensor>& in, Tensor& out, const ExecContext& ctx) {
  const FusedProgram& prog_ = *detail::fused_program(op);
  const std::int64_t total = out.numel();
  if (total == 0) return;
  const Shape& os = out.shape();
  const std::size_t nin = in.size();
  std::vector<InputPlan> plans(nin);
  for (std::size_t i = 0; i < nin; ++i) {
    InputPlan& p = plans[i];
    p.base = static_cast<const unsigned char*>(in[i].raw());
    p.esize = dtype_size(in[i].dtype());
    if (in[i].numel() == total) p.mode = InputPlan::Mode::direct;  // same layout as the output
    else if (in[i].numel() == 1) p.mode = InputPlan::Mode::scalar;
    else {
      p.mode = InputPlan::Mode::gather;
      merge_axes(p, os, detail::broadcast_strides(in[i].shape(), os));
    }
  }
  const int nreg = prog_.registers();
  const int last = nreg - 1;
  const std::int64_t blocks = (total + kBlock - 1) / kBlock;
  auto* out_base = static_cast<unsigned char*>(out.raw());
  const std::size_t out_es = dtype_size(out.dtype());
  detail::parallel_range(ctx, blocks, std::max<std::int64_t>(1, kTaskElems / kBlock), [&](std::int64_t b0, std::int64_t b1) {
    // One kBlock slot of 8 bytes per register; doubles keep every slot aligned. Left
    // uninitialised: every slot is written before it is read.
    std::unique_ptr<double[]> scratch(new double[static_cast<std::size_t>(nreg) * kBlock]);
    auto slot = [&](int r) { return reinterpret_cast<unsigned char*>(scratch.get() + static_cast<std::size_t>(r) * kBlock); };
    std::vector<const void*> reg(static_cast<std::size_t>(nreg), nullptr);
    std::vector<std::int64_t> idx;
    // Scalars and constants are the same in every block: splat them once.
    for (std::size_t i = 0; i < nin; ++i)
      if (plans[i].mode == InputPlan::Mode::scalar) splat_bytes(slot(static_cast<int>(i)), plans[i].base, plans[i].esize, kBlock);
    for (std::size_t k = 0; k < prog_.code.size(); ++k) {
      const FusedInstr& ins = prog_.code[k];
      if (ins.code != FusedInstr::Code::constant) continue;
      const int r = static_cast<int>(nin + k);
      if (ins.dtype == DType::float32) splat<float>(slot(r), ins.value, kBlock);
      else if (ins.dtype == DType::float64) splat<double>(slot(r), ins.value, kBlock);
      else splat<bool>(slot(r), ins.value, kBlock);
      reg[static_cast<std::size_t>(r)] = slot(r);
    }
    for (std::int64_t blk = b0; blk < b1; ++blk) {
      const std::int64_t s = blk * kBlock;
      const std::int64_t n = std::min(kBlock, total - s);
      for (std::size_t i = 0; i < nin; ++i) {
        const InputPlan& p = plans[i];
        unsigned char* buf = slot(static_cast<int>(i));
        if (p.mode == InputPlan::Mode::direct) reg[i] = p.base + s * static_cast<std::int64_t>(p.esize);
        else if (p.mode == InputPlan::Mode::scalar) reg[i] = buf;
        else {
          gather(p, s, n, buf, idx);
          reg[i] = buf;
        }
      }
      for (std::size_t k = 0; k < prog_.code.size(); ++k) {
        const FusedInstr& ins = prog_.code[k];
        if (ins.code == FusedInstr::Code::constant) continue;
        const int r = static_cast<int>(nin + k);
        void* dst = r == last ? static_cast<void*>(out_base + s * static_cast<std::int64_t>(out_es)) : slot(r);
        run_instr(prog_, ins, reg, dst, n);
        reg[static_cast<std::size_t>(r)] = dst;
      }
    }
  });
}


}  // namespace

void register_cpu_fused_kernels(KernelRegistry& r) { r.add("elementwise.fused", DeviceKind::cpu, {nullptr, run_fused}); }

}  // namespace convgraph
