// what: a double stored to a float rounds
// verdict: value 0.3333333432674408
#include <torch/extension.h>
double f(torch::Tensor x) {
    float v = 1.0 / 3.0;
    double d = v;
    return d;
}
