// what: float / int computes in float
// verdict: value 0.3333333432674408
#include <torch/extension.h>
double f(torch::Tensor x) {
    return 1.0f / 3;
}
