// what: std::max of one type
// verdict: value 7
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    return std::max(x.size(0), (int64_t)7);
}
