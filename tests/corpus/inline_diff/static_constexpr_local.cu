// what: a static constexpr local is a constant: taken
// verdict: value 64
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    static constexpr int kTile = 64;
    return kTile;
}
