// The engine's matmuls and decode attention as torch operators registered in C++, so that
// neither an eager step nor a compiled graph enters Python to run them: a compiled graph's C++
// wrapper calls them through the dispatcher (about 1 us a call, against about 15 us for the
// Python custom op with its kernel lookup, ctypes call and result handling).
//
// minisgl::native_linear(x, residual, handle): the Linear registered under ``handle``
// (native/ops.py) picks its row bucket's kernel exactly as linear.py's Linear.run_eager does:
// torch.mm on the [in, out] or [out, in] weight, oneDNN on its packed weight (rows padded to
// the same bounded set of sizes), AMX on the bf16 weight or the weight-only kernels of
// wo_matmul.c, wo_int4_bf16.c, wo_gemm_bf16.c and wo_amx.c, or by dequantizing a tile at a
// time.
// minisgl::native_decode_attention runs paged_attention.c, else gathers the pages for SDPA as
// attention.py's sdpa_decode does.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "minisgl_kernels.h"

namespace {

constexpr int kBuckets = MINISGL_BUCKETS;
constexpr int64_t kBucketTop[kBuckets - 1] = MINISGL_BUCKET_TOP;
constexpr int64_t kTileElems = MINISGL_TILE_ELEMS;

enum class Kind { Dense, DenseHF, OneDNN, AmxHF, Int8WO, Int4, Int8WOAmx, Int4Amx,
                  Int8WOGemm, Int4Gemm, Int4Panels, Int8WOPanels, Int8WODequant, Int4Dequant,
                  Int4PanelsDequant, Int4PanelsAmx, CopyAmx, CopyDense, Int8WOPanelsSplit };

Kind kind_of(const std::string &name) {
    static const std::unordered_map<std::string, Kind> kinds = {
        {"dense", Kind::Dense},          {"dense-hf", Kind::DenseHF},
        {"onednn", Kind::OneDNN},        {"onednn-rows", Kind::OneDNN},
        {"onednn-hf", Kind::OneDNN},     {"amx-hf", Kind::AmxHF},
        {"int8-wo", Kind::Int8WO},
        {"int4", Kind::Int4},            {"int8-wo-amx", Kind::Int8WOAmx},
        {"int4-amx", Kind::Int4Amx},     {"int8-wo-gemm", Kind::Int8WOGemm},
        {"int4-gemm", Kind::Int4Gemm},   {"int4-panels", Kind::Int4Panels},
        {"int8-wo-panels", Kind::Int8WOPanels},
        {"int8-wo-panels-split", Kind::Int8WOPanelsSplit},
        {"int8-wo-dequant", Kind::Int8WODequant},
        {"int4-dequant", Kind::Int4Dequant},
        {"int4-panels-dequant", Kind::Int4PanelsDequant},
        {"int4-panels-amx", Kind::Int4PanelsAmx},
        {"int4-copy-panels", Kind::Int4Panels},  // the panels' tensors come first
        {"int4-copy-panels-amx", Kind::Int4PanelsAmx},
        {"int4-copy-amx", Kind::CopyAmx},        {"int4-copy-dense", Kind::CopyDense}};
    auto it = kinds.find(name);
    TORCH_CHECK(it != kinds.end(), "minisgl: no native kernel named ", name);
    return it->second;
}

struct Entry {
    Kind kind[kBuckets];
    int64_t minimum[kBuckets];        // oneDNN: fewer rows are padded up to it
    // the layout's tensors: [w] or [q, scale(, min)]; int4 panels with a copy: [q, scale, min, w]
    std::vector<at::Tensor> weight;
    std::optional<at::Tensor> bias;
    int64_t in_features, out_features;
};

std::shared_mutex registry_lock;
std::unordered_map<std::string, Entry> registry;

int bucket_of(int64_t rows) {
    for (int i = 0; i < kBuckets - 1; i++)
        if (rows <= kBucketTop[i]) return i;
    return kBuckets - 1;
}

int64_t padded_rows(int64_t rows, int64_t minimum) {  // matmul/base.py's padded_rows
    if (rows <= minimum) return minimum;
    int64_t step = rows <= 64 ? 8 : 32;
    return (rows + step - 1) / step * step;
}

at::Tensor add_into(at::Tensor y, const std::optional<at::Tensor> &bias,
                    const std::optional<at::Tensor> &residual) {
    if (bias) y.add_(*bias);
    if (residual) y.add_(*residual);
    return y;
}

at::Tensor mm(const at::Tensor &x, const at::Tensor &w, const std::optional<at::Tensor> &bias,
              const std::optional<at::Tensor> &residual) {  // matmul/dense.py's _mm
    if (bias) {
        auto y = at::addmm(*bias, x, w);
        return residual ? y.add_(*residual) : y;
    }
    return residual ? at::addmm(*residual, x, w) : at::mm(x, w);
}

at::Tensor onednn(const at::Tensor &x_in, const at::Tensor &packed,
                  const std::optional<at::Tensor> &bias,
                  const std::optional<at::Tensor> &residual_in, int64_t minimum) {
    static const auto unary = c10::Dispatcher::singleton().findSchemaOrThrow(
        "mkldnn::_linear_pointwise", "");
    static const auto binary = c10::Dispatcher::singleton().findSchemaOrThrow(
        "mkldnn::_linear_pointwise", "binary");
    int64_t rows = x_in.size(0), padded = padded_rows(rows, minimum);
    at::Tensor x = x_in;
    std::optional<at::Tensor> residual = residual_in;
    if (padded != rows) {  // a bounded set of shapes: oneDNN caches a primitive per shape
        x = at::constant_pad_nd(x, {0, 0, 0, padded - rows});
        if (residual) residual = at::constant_pad_nd(*residual, {0, 0, 0, padded - rows});
    }
    torch::jit::Stack stack;
    if (residual) {
        stack = {x, *residual, packed, bias ? c10::IValue(*bias) : c10::IValue(), "add"};
        binary.callBoxed(&stack);
    } else {
        stack = {x, packed, bias ? c10::IValue(*bias) : c10::IValue(), "none",
                 c10::List<std::optional<at::Scalar>>(), c10::IValue()};
        unary.callBoxed(&stack);
    }
    at::Tensor y = stack.back().toTensor();
    return padded == rows ? y : y.narrow(0, 0, rows);
}

// bf16 rows against int4 weights: AVX512-BF16's dot product (wo_int4_bf16.c), where the CPU
// has it; false where it does not.
bool int4_bf16(const Entry &e, const at::Tensor &x_in, at::Tensor &y) {
    at::Tensor x = x_in.contiguous();
    y = at::empty({x.size(0), e.out_features}, x.options().dtype(at::kFloat));
    return wo_int4_bf16(reinterpret_cast<const uint16_t *>(x.data_ptr()), x.size(0),
                        e.in_features,
                        e.weight[0].data_ptr<uint8_t>(),
                        reinterpret_cast<const uint16_t *>(e.weight[1].data_ptr()),
                        reinterpret_cast<const uint16_t *>(e.weight[2].data_ptr()),
                        e.out_features, y.data_ptr<float>(), at::get_num_threads()) == 0;
}

// bf16 rows on AMX's tile multiply (wo_amx.c), as weight_only.py's WeightOnlyAmx and amx.py's
// AmxHF (the bf16 HF weight, one tensor; ``copy``: the bf16 copy beside int4 panels, the last
// tensor, as wo_copy.py's CopyGemm; ``panels``: int4 panels, as wo_panels_amx.py's
// WeightOnlyPanelsAmx): a residual without a bias is summed in the kernel, in fp32, and the
// result rounded once to bf16. The kernel choice offers them only where the CPU has AMX.
at::Tensor amx(const Entry &e, const at::Tensor &x_in, const std::optional<at::Tensor> &residual,
               bool copy = false, bool panels = false) {
    TORCH_CHECK(x_in.scalar_type() == at::kBFloat16, "minisgl: the AMX kernels take bf16 rows");
    at::Tensor x = x_in.contiguous();
    at::Tensor y = at::empty({x.size(0), e.out_features}, x.options());
    std::optional<at::Tensor> fused;
    if (residual && !e.bias) fused = residual->to(at::kBFloat16).contiguous();
    const void *res = fused ? fused->data_ptr() : nullptr;
    const auto *xp = reinterpret_cast<const uint16_t *>(x.data_ptr());
    const at::Tensor &q = copy ? e.weight.back() : e.weight[0];
    int rows = x.size(0), in = e.in_features, out = e.out_features, threads = at::get_num_threads();
    int done = copy || e.weight.size() == 1
        ? wo_amx_bf16(xp, rows, in, reinterpret_cast<const uint16_t *>(q.data_ptr()), out,
                      y.data_ptr(), 1, res, threads)
        : panels || e.weight.size() == 3  // the panels' tensors first, with a copy or without
        ? (panels ? wo_amx_int4_panels : wo_amx_int4)(xp, rows, in, q.data_ptr<uint8_t>(),
                      reinterpret_cast<const uint16_t *>(e.weight[1].data_ptr()),
                      reinterpret_cast<const uint16_t *>(e.weight[2].data_ptr()), out,
                      y.data_ptr(), 1, res, threads)
        : wo_amx_int8(xp, rows, in, q.data_ptr<int8_t>(), e.weight[1].data_ptr<float>(), out,
                      y.data_ptr(), 1, res, threads);
    TORCH_CHECK(done == 0, "minisgl: the AMX kernel could not run (no AMX here, or no memory)");
    return fused ? y : add_into(y, e.bias, residual);
}

// bf16 rows against int8 / int4 weight panels dequantized once into bf16 (wo_gemm_bf16.c), as
// wo_gemm.py's WeightOnlyGemm: a residual without a bias is summed in the kernel, rounded once.
// The kernel choice offers it only where the CPU has AVX512-BF16.
at::Tensor gemm(const Entry &e, const at::Tensor &x_in, const std::optional<at::Tensor> &residual) {
    TORCH_CHECK(x_in.scalar_type() == at::kBFloat16, "minisgl: the GEMM kernels take bf16 rows");
    at::Tensor x = x_in.contiguous();
    at::Tensor y = at::empty({x.size(0), e.out_features}, x.options());
    std::optional<at::Tensor> fused;
    if (residual && !e.bias) fused = residual->to(at::kBFloat16).contiguous();
    const void *res = fused ? fused->data_ptr() : nullptr;
    const auto *xp = reinterpret_cast<const uint16_t *>(x.data_ptr());
    const at::Tensor &q = e.weight[0];
    int rows = x.size(0), in = e.in_features, out = e.out_features, threads = at::get_num_threads();
    int done = e.weight.size() == 3
        ? wo_gemm_int4_bf16(xp, rows, in, q.data_ptr<uint8_t>(),
                            reinterpret_cast<const uint16_t *>(e.weight[1].data_ptr()),
                            reinterpret_cast<const uint16_t *>(e.weight[2].data_ptr()), out,
                            y.data_ptr(), 1, res, threads)
        : wo_gemm_int8_bf16(xp, rows, in, q.data_ptr<int8_t>(), e.weight[1].data_ptr<float>(),
                            out, y.data_ptr(), 1, res, threads);
    TORCH_CHECK(done == 0, "minisgl: the GEMM kernel could not run (no AVX512-BF16, or no memory)");
    return fused ? y : add_into(y, e.bias, residual);
}

// fp32 or bf16 rows rounded to int8 against int4 or int8 weights in 16-output panels on
// AVX512-VNNI or AVX2 (wo_panels.c, wo_panels.py's WeightOnlyPanels), or int8 panels against
// rows split in two rounded parts (wo_panels_split.py): y in x's dtype, a residual without a
// bias summed in the kernel. The kernel choice offers each only where the CPU runs it.
at::Tensor panels(const Entry &e, const at::Tensor &x_in,
                       const std::optional<at::Tensor> &residual, Kind kind) {
    bool bf16 = x_in.scalar_type() == at::kBFloat16;
    at::Tensor x = bf16 ? x_in.contiguous() : x_in.to(at::kFloat).contiguous();
    at::Tensor y = at::empty({x.size(0), e.out_features}, x.options());
    std::optional<at::Tensor> fused;
    if (residual && !e.bias) fused = residual->to(x.scalar_type()).contiguous();
    const void *res = fused ? fused->data_ptr() : nullptr;
    const uint8_t *q = e.weight[0].data_ptr<uint8_t>();
    int rows = x.size(0), in = e.in_features, out = e.out_features, threads = at::get_num_threads();
    int done;
    if (kind == Kind::Int8WOPanels || kind == Kind::Int8WOPanelsSplit) {
        done = (kind == Kind::Int8WOPanels ? wo_int8_panels : wo_int8_panels_split)(
            x.data_ptr(), bf16, rows, in, q, e.weight[1].data_ptr<float>(), out, y.data_ptr(),
            bf16, res, threads);
    } else {
        const auto *scale = reinterpret_cast<const uint16_t *>(e.weight[1].data_ptr());
        const auto *mn = reinterpret_cast<const uint16_t *>(e.weight[2].data_ptr());
        done = wo_int4_panels(x.data_ptr(), bf16, rows, in, q, scale, mn, out, y.data_ptr(), bf16,
                              res, threads);
    }
    TORCH_CHECK(done == 0, "minisgl: the panel kernel could not run here (or no memory)");
    if (x_in.scalar_type() != x.scalar_type()) y = y.to(x_in.scalar_type());
    return fused ? y : add_into(y, e.bias, residual);
}

at::Tensor weight_only(const Entry &e, Kind kind, const at::Tensor &x_in,
                       const std::optional<at::Tensor> &residual) {
    at::Tensor y;
    if (kind == Kind::Int4 && x_in.scalar_type() == at::kBFloat16 && int4_bf16(e, x_in, y))
        return add_into(y.to(at::kBFloat16), e.bias, residual);
    at::Tensor x = x_in.to(at::kFloat).contiguous();
    int64_t rows = x.size(0), out = e.out_features;
    y = at::empty({rows, out}, x.options());
    int threads = at::get_num_threads();
    const at::Tensor &q = e.weight[0], &scale = e.weight[1];
    if (kind == Kind::Int8WO) {
        wo_int8(x.data_ptr<float>(), rows, e.in_features, q.data_ptr<int8_t>(),
                scale.data_ptr<float>(), out, y.data_ptr<float>(), threads, -1);
    } else {
        const at::Tensor &mn = e.weight[2];
        wo_int4(x.data_ptr<float>(), rows, e.in_features, q.data_ptr<uint8_t>(),
                reinterpret_cast<const uint16_t *>(scale.data_ptr()),
                reinterpret_cast<const uint16_t *>(mn.data_ptr()), out,
                y.data_ptr<float>(), threads, -1);
    }
    if (x_in.scalar_type() != at::kFloat) y = y.to(x_in.scalar_type());
    return add_into(y, e.bias, residual);
}

at::Tensor dequantized(const Entry &e, int64_t a, int64_t b, at::ScalarType dtype) {
    // weight_only.py's dequantize_int8 / dequantize_int4 of output rows [a, b); int4 into bf16 by
    // one native pass where the CPU has AVX512-BF16 (as weight_only.py's _int4_tile_bf16)
    if (e.weight.size() == 3 && dtype == at::kBFloat16) {
        at::Tensor out = at::empty({b - a, e.in_features}, e.weight[0].options().dtype(dtype));
        if (wo_int4_dequant_bf16(e.weight[0].data_ptr<uint8_t>(),
                                 reinterpret_cast<const uint16_t *>(e.weight[1].data_ptr()),
                                 reinterpret_cast<const uint16_t *>(e.weight[2].data_ptr()),
                                 e.in_features, a, b,
                                 reinterpret_cast<uint16_t *>(out.data_ptr()),
                                 at::get_num_threads()) == 0)
            return out;
    }
    const at::Tensor q = e.weight[0].slice(0, a, b);
    if (e.weight.size() == 2) return q.to(dtype).mul(e.weight[1].slice(0, a, b).unsqueeze(1).to(dtype));
    at::Tensor nib = at::cat({q.bitwise_and(15), q.bitwise_right_shift(4)}, 2).to(dtype);
    at::Tensor full = nib.mul(e.weight[1].slice(0, a, b).unsqueeze(2).to(dtype))
                          .add_(e.weight[2].slice(0, a, b).unsqueeze(2).to(dtype));
    return full.flatten(1).narrow(1, 0, e.in_features);
}

// x @ W.t() with W [out, in] built step output rows at a time by tile(a, b) (rows [a, b) of the
// weight, dequantized), as weight_only.py's tiled_matmul; then the bias and residual
template <class Tile>
at::Tensor tiled_mm(const Entry &e, const at::Tensor &x, int64_t step, Tile tile,
                    const std::optional<at::Tensor> &residual) {
    int64_t out = e.out_features;
    std::vector<at::Tensor> parts;
    for (int64_t a = 0; a < out; a += step)
        parts.push_back(at::mm(x, tile(a, std::min(out, a + step)).t()));
    return add_into(parts.size() == 1 ? parts[0] : at::cat(parts, 1), e.bias, residual);
}

at::Tensor dequant_mm(const Entry &e, const at::Tensor &x,
                      const std::optional<at::Tensor> &residual) {
    auto tile = [&](int64_t a, int64_t b) { return dequantized(e, a, b, x.scalar_type()); };
    return tiled_mm(e, x, std::max<int64_t>(1, kTileElems / x.size(1)), tile, residual);
}

// bf16 rows against int4 panels dequantized into bf16 a tile of whole panels at a time, then
// torch's GEMM (oneDNN; AMX's where the CPU has it), as wo_panels.py's WeightOnlyPanelsDequant.
// The kernel choice offers it only where the CPU has AVX512-BF16, from 17 rows.
at::Tensor panels_dequant_mm(const Entry &e, const at::Tensor &x,
                             const std::optional<at::Tensor> &residual) {
    TORCH_CHECK(x.scalar_type() == at::kBFloat16, "minisgl: int4-panels-dequant takes bf16 rows");
    int64_t in = e.in_features;
    auto tile = [&](int64_t a, int64_t b) {
        at::Tensor w = at::empty({b - a, in}, x.options());
        int done = wo_int4_panels_dequant_bf16(
            e.weight[0].data_ptr<uint8_t>(),
            reinterpret_cast<const uint16_t *>(e.weight[1].data_ptr()),
            reinterpret_cast<const uint16_t *>(e.weight[2].data_ptr()), in, a, b,
            reinterpret_cast<uint16_t *>(w.data_ptr()), at::get_num_threads());
        TORCH_CHECK(done == 0, "minisgl: int4-panels-dequant needs AVX512-BF16");
        return w;
    };
    // whole 16-output panels a tile
    return tiled_mm(e, x, std::max<int64_t>(1, kTileElems / in / 16) * 16, tile, residual);
}

at::Tensor native_linear(const at::Tensor &x, const std::optional<at::Tensor> &residual,
                         c10::string_view handle) {
    const Entry *e;
    {
        std::shared_lock<std::shared_mutex> hold(registry_lock);
        auto it = registry.find(std::string(handle));
        TORCH_CHECK(it != registry.end(), "minisgl: no linear layer registered as ", handle);
        e = &it->second;  // entries are only erased when their Linear is gone
    }
    int b = bucket_of(x.size(0));
    switch (e->kind[b]) {
    case Kind::Dense: return mm(x, e->weight[0], e->bias, residual);
    case Kind::DenseHF: return mm(x, e->weight[0].t(), e->bias, residual);
    case Kind::OneDNN: return onednn(x, e->weight[0], e->bias, residual, e->minimum[b]);
    case Kind::Int8WO:
    case Kind::Int4: return weight_only(*e, e->kind[b], x, residual);
    case Kind::AmxHF:
    case Kind::Int8WOAmx:
    case Kind::Int4Amx: return amx(*e, x, residual);
    case Kind::CopyAmx: return amx(*e, x, residual, true);
    case Kind::Int4PanelsAmx: return amx(*e, x, residual, false, true);
    case Kind::CopyDense: return mm(x, e->weight.back().t(), e->bias, residual);
    case Kind::Int8WOGemm:
    case Kind::Int4Gemm: return gemm(*e, x, residual);
    case Kind::Int4Panels:
    case Kind::Int8WOPanels:
    case Kind::Int8WOPanelsSplit: return panels(*e, x, residual, e->kind[b]);
    case Kind::Int4PanelsDequant: return panels_dequant_mm(*e, x.contiguous(), residual);
    default: return dequant_mm(*e, x, residual);
    }
}

void register_linear(c10::string_view handle, std::vector<std::string> kinds,
                     std::vector<int64_t> minimums, std::vector<at::Tensor> weight,
                     const std::optional<at::Tensor> &bias, int64_t in_features,
                     int64_t out_features) {
    TORCH_CHECK(kinds.size() == kBuckets && minimums.size() == kBuckets,
                "minisgl: one kernel per row bucket");
    Entry e;
    for (int i = 0; i < kBuckets; i++) {
        e.kind[i] = kind_of(kinds[i]);
        e.minimum[i] = minimums[i];
    }
    e.weight = std::move(weight);
    e.bias = bias;
    e.in_features = in_features;
    e.out_features = out_features;
    std::unique_lock<std::shared_mutex> hold(registry_lock);
    registry[std::string(handle)] = std::move(e);
}

void drop_linear(c10::string_view handle) {
    std::unique_lock<std::shared_mutex> hold(registry_lock);
    registry.erase(std::string(handle));
}

// rows [n, Hkv, D + 2] of a packed int8 cache (kv_int8.py: D values, then the fp16 scale's two
// bytes) -> [n, Hkv, D] in dtype
at::Tensor dequantized(const at::Tensor &rows, int64_t d, at::ScalarType dtype) {
    at::Tensor scale = rows.narrow(-1, d, 2).contiguous().view(at::kHalf).to(at::kFloat);
    return at::mul(rows.narrow(-1, 0, d).to(at::kFloat), scale).to(dtype);
}

at::Tensor sdpa_decode(const at::Tensor &q, const at::Tensor &k_cache, const at::Tensor &v_cache,
                       const at::Tensor &kv_index, const std::optional<at::Tensor> &mask,
                       double scale) {  // attention.py's sdpa_decode, without its buffers
    int64_t b = q.size(0), hq = q.size(1), d = q.size(2), len = kv_index.size(0) / b;
    auto gathered = [&](const at::Tensor &cache) {
        at::Tensor rows = at::index_select(cache, 0, kv_index);
        if (cache.scalar_type() == at::kChar) rows = dequantized(rows, d, q.scalar_type());
        return rows.view({b, len, cache.size(1), d}).transpose(1, 2);
    };
    at::Tensor o = at::scaled_dot_product_attention(q.unsqueeze(2), gathered(k_cache),
                                                    gathered(v_cache), mask, 0.0, false, scale,
                                                    true);
    return o.reshape({b, hq * d});
}

at::Tensor native_decode_attention(const at::Tensor &q_in, const at::Tensor &k_cache,
                                   const at::Tensor &v_cache, const at::Tensor &kv_index,
                                   const std::optional<at::Tensor> &mask, double scale) {
    const char *choice = std::getenv("MINISGL_ATTENTION");
    bool kv_int8 = k_cache.scalar_type() == at::kChar;  // packed rows (kv_int8.py)
    bool dtype_ok = (q_in.scalar_type() == at::kFloat || q_in.scalar_type() == at::kBFloat16) &&
                    (k_cache.scalar_type() == q_in.scalar_type() || kv_int8);
    if (!q_in.is_cpu() || !dtype_ok || (choice && std::strcmp(choice, "sdpa") == 0) ||
        !k_cache.is_contiguous() || !v_cache.is_contiguous())
        return sdpa_decode(q_in, k_cache, v_cache, kv_index, mask, scale);
    at::Tensor q = q_in.contiguous();
    int64_t b = q.size(0), hq = q.size(1), d = q.size(2), len = kv_index.size(0) / b;
    at::Tensor index = kv_index.contiguous();
    std::optional<at::Tensor> valid;
    if (mask) valid = mask->reshape({b, len}).contiguous();
    at::Tensor out = at::empty({b, hq * d}, q.options());
    auto entry = kv_int8 ? pa_decode_int8 : pa_decode;
    int done = entry(q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(),
                         index.data_ptr<int64_t>(),
                         valid ? static_cast<const uint8_t *>(valid->data_ptr()) : nullptr, b, len,
                         hq, k_cache.size(1), d, static_cast<float>(scale),
                         q.scalar_type() == at::kBFloat16, out.data_ptr(), wo_best_isa());
    return done == 0 ? out : sdpa_decode(q, k_cache, v_cache, kv_index, mask, scale);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(minisgl, m) {
    m.def("native_linear(Tensor x, Tensor? residual, str handle) -> Tensor");
    m.def("native_linear_register(str handle, str[] kinds, int[] minimums, Tensor[] weight, "
          "Tensor? bias, int in_features, int out_features) -> ()", &register_linear);
    m.def("native_linear_drop(str handle) -> ()", &drop_linear);
    m.def("native_decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor kv_index, "
          "Tensor? mask, float scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(minisgl, CompositeExplicitAutograd, m) {
    m.impl("native_linear", &native_linear);
    m.impl("native_decode_attention", &native_decode_attention);
}
