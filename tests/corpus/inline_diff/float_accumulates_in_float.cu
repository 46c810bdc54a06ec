// what: float += int rounds to float
// verdict: value 16777216
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    float a = 16777216.0f;
    a += 1;
    return (int64_t)a;
}
