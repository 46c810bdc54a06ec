// what: static_cast<unsigned>(-1) + 0 in long
// verdict: value 4294967295
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    return static_cast<unsigned>(-1) + static_cast<int64_t>(-1) / 2;
}
