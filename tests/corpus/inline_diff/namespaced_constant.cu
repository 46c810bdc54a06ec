// what: constants in a namespace, read qualified
// verdict: value 320
#include <torch/extension.h>
namespace cfg {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
}
int64_t f(torch::Tensor x) {
    return cfg::kThreads + cfg::kWarps * 8;
}
