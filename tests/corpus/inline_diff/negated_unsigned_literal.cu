// what: -1u is unsigned int
// verdict: value 4294967295
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    return -1u;
}
