// what: sizeof is size_t
// verdict: value 50
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    return sizeof(int64_t) + sizeof(float) * 10 + sizeof(short);
}
