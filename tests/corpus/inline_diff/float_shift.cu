// what: << is not defined on float
// verdict: error expression must have integral or unscoped enum type
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    float v = 2.0f;
    return v << 1;
}
